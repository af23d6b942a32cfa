"""The package as a user gets it: the wheel and the sdist built from the tree, the wheel installed into a fresh virtual
environment with the core only (no extra), and a real arena run with it against models and a judge behind
OpenAI-compatible endpoints (`arena serve` processes of the full environment, on 127.0.0.1), to a leaderboard and a
report. On that install every command's --help exits 0, and the commands that need an extra say which, in one line.

The install takes the core's dependencies from the package index `make` installs from (pip's cache is warm after
`make`); nothing else leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from arena_learning.cli.listing import COMMANDS

from .conftest import ARENA, REPO, free_port, wait_for_port
from .test_guides import SERVE

pytestmark = pytest.mark.slow  # a build, a fresh venv's install and three model servers: a few minutes on two cores

HEAVY = ("torch", "llama_cpp", "transformers", "trl", "pandas", "pyarrow", "datasets", "sentence_transformers",
         "ray", "gguf")
CORE_BUDGET_BYTES = 400_000_000  # the core install in a fresh venv, pip and setuptools included
GROUPS = ("testset", "pool", "models", "batch")
QUESTIONS = ("How can I sleep better?", "What is the capital of France?", "Give me a name for a grey cat.",
             "How do I boil an egg?")


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    """(the fresh venv's bin folder, the dist folder): the tree's wheel installed with the core's dependencies only."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    build = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "-o", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    wheel = next(dist.glob("arena_learning-*.whl"))
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                         capture_output=True, text=True, env=env, timeout=900)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return venv / "bin", dist


def _core_env() -> dict[str, str]:
    # the core venv's commands in a clean process: not this suite's interpreter paths nor its kernel pins
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


def test_the_wheel_and_the_sdist_carry_the_package_and_its_data(core):
    _, dist = core
    names = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
    assert "arena_learning/judges/arena-hard-v1/judge.yaml" in names
    assert any(n.startswith("arena_learning/people/assets/") for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(next(dist.glob("*.whl"))).read(meta).decode()
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    core_requires = [r for r in requires if "extra ==" not in r]
    assert not [r for r in core_requires if re.search(r"torch|llama|trl|pandas|==", r)], core_requires
    with tarfile.open(next(dist.glob("*.tar.gz"))) as sdist:
        members = sdist.getnames()
    assert any(m.endswith("/pyproject.toml") for m in members) and any(m.endswith("/src/arena_learning/store.py")
                                                                      for m in members)


def test_the_core_install_is_light_and_brings_no_extra(core):
    bin_dir, _ = core
    venv = bin_dir.parent
    size = _du(venv)
    assert size <= CORE_BUDGET_BYTES, f"the core install takes {size / 1e6:.0f} MB (budget 400 MB)"
    code = ("import importlib.util, json; print(json.dumps([m for m in " + repr(list(HEAVY))
            + " if importlib.util.find_spec(m)]))")
    found = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True, check=True,
                           env=_core_env())
    assert json.loads(found.stdout) == []


def test_every_commands_help_exits_0_on_the_core(core):
    bin_dir, _ = core
    arena = str(bin_dir / "arena")
    env = _core_env()
    calls = [[], *([name] for name, _ in COMMANDS)]
    for group in GROUPS:
        listed = subprocess.run([arena, group, "--help"], capture_output=True, text=True, env=env, timeout=120)
        calls += [[group, sub] for sub in re.findall(r"^│ ([a-z][a-z-]+) ", listed.stdout, re.M)]
    assert len(calls) > len(COMMANDS) + len(GROUPS)  # the groups' subcommands were found
    for args in calls:
        ran = subprocess.run([arena, *args, "--help"], capture_output=True, text=True, env=env, timeout=120)
        assert ran.returncode == 0, (args, ran.stdout[-2000:], ran.stderr[-2000:])


@pytest.mark.parametrize(("args", "extra"), [
    (["run", "examples/quickstart.yaml"], "local"),
    (["testset", "build", "examples/testset.yaml"], "curate"),
    (["flywheel", "examples/flywheel-my-model.yaml"], "train"),
    (["ratings", "battles.parquet"], "data"),
])
def test_a_command_that_needs_an_extra_says_which_in_one_line(core, tmp_path, args, extra):
    bin_dir, _ = core
    (tmp_path / "battles.parquet").write_bytes(b"PAR1")
    ran = subprocess.run([str(bin_dir / "arena"), *[str(REPO / a) if a.startswith("examples/") else a for a in args]],
                         capture_output=True, text=True, env=_core_env(), cwd=tmp_path, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "pip install 'arena-learning[" in lines[0] and f"'{extra}'" in lines[0], lines[0]
    assert not (tmp_path / "workspaces").exists()  # stopped before any work


def test_a_real_arena_over_endpoints_runs_on_the_core_to_a_board_and_a_report(core, tmp_path):
    bin_dir, _ = core
    serve_cfg = tmp_path / "serve.yaml"
    serve_cfg.write_text(SERVE, encoding="utf-8")
    keys = {"mine-v1": "MY_ENDPOINT_KEY", "mine-v2": "MY_ENDPOINT_KEY", "judge": "JUDGE_KEY"}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MY_ENDPOINT_KEY": "endpoint-key-0123456789abcdef",
           "JUDGE_KEY": "judge-key-0123456789abcdefgh"}
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}]}) + "\n" for q in QUESTIONS),
                       encoding="utf-8")
    procs, urls = [], {}
    try:
        for name, key in keys.items():  # the full environment serves the models and the judge
            port = free_port()
            procs.append(subprocess.Popen([*ARENA, "serve", "--config", str(serve_cfg), "--model", name, "--port",
                                           str(port), "--api-key-env", key], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            urls[name] = (f"http://127.0.0.1:{port}/v1", port)
        for proc, (_, port) in zip(procs, urls.values()):
            wait_for_port(port, proc)
        models = "".join(
            f"  - {{name: {name}, engine: openai, model: {name}, base_url: '{urls[name][0]}', api_key_env: "
            f"MY_ENDPOINT_KEY, params: {{max_tokens: 32}}}}\n" for name in ("mine-v1", "mine-v2"))
        run_cfg = tmp_path / "arena.yaml"
        run_cfg.write_text(
            f"name: core-arena\nprompts: {{path: {prompts}}}\nmodels:\n{models}"
            "judge:\n  kind: llm\n  name: judge\n  template: arena-hard\n  sampling: {max_tokens: 12}\n"
            f"  model: {{name: judge, engine: openai, model: judge, base_url: '{urls['judge'][0]}', "
            "api_key_env: JUDGE_KEY}\n"
            "battles: {schedule: all}\nratings: {bootstrap: 20}\n", encoding="utf-8")
        ws = tmp_path / "ws"
        core_env = {**_core_env(), "MY_ENDPOINT_KEY": env["MY_ENDPOINT_KEY"], "JUDGE_KEY": env["JUDGE_KEY"]}
        arena = str(bin_dir / "arena")
        run = subprocess.run([arena, "run", str(run_cfg), "-w", str(ws)], capture_output=True, text=True,
                             env=core_env, timeout=900)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        assert re.search(r"rank\s+CI rank\s+model", run.stdout), run.stdout
        board = subprocess.run([arena, "leaderboard", str(ws), "--json"], capture_output=True, text=True,
                               env=core_env, timeout=300, check=True)
        assert {r["model"] for r in json.loads(board.stdout)} == {"mine-v1", "mine-v2"}
        manifest = subprocess.run([arena, "leaderboard", str(ws), "--manifest"], capture_output=True, text=True,
                                  env=core_env, timeout=300, check=True)
        kernels = json.loads(manifest.stdout)["cpu_kernels"]  # what the command that ran it pinned, said once
        assert kernels.startswith("AVX2 pinned") or "not x86-64" in kernels, kernels
        report = subprocess.run([arena, "report", str(ws)], capture_output=True, text=True, env=core_env,
                                timeout=300)
        assert report.returncode == 0, report.stdout + report.stderr
        html = (ws / "report.html").read_text(encoding="utf-8")
        assert "mine-v1" in html and "mine-v2" in html
        for secret in (env["MY_ENDPOINT_KEY"], env["JUDGE_KEY"]):  # keys stay out of the workspace and the report
            assert secret not in html and secret.encode() not in (ws / "arena.db").read_bytes()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
