"""The embedded default on any CPU: a portable llama.cpp build, a smoke check in a child, `arena doctor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from arena_learning.engines import llama_build, llama_check
from arena_learning.engines.doctor import wide_features
from arena_learning.errors import EngineError

from .conftest import ARENA, arena, load_benchmark, write_config

CRASH = "import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n"


def test_the_build_options_are_portable():
    args = llama_build.CMAKE_ARGS.split()
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    for wide in ("AVX512", "AMX_TILE", "AMX_INT8", "AMX_BF16", "AVX_VNNI"):
        assert f"-DGGML_{wide}=OFF" in args
    # the wheel is kept under a name that changes with the options: a build with other flags is never reused
    assert llama_build.BUILD_TAG in llama_build.wheel_dir().name and llama_build.VERSION in llama_build.wheel_dir().name


@pytest.mark.slow  # loads the bundled model
def test_the_installed_library_is_the_portable_build_and_generates():
    report = llama_check.run_probe()
    assert report["ok"], report
    assert report["tokens"] >= 1
    assert "AVX2 = 1" in report["system_info"]
    assert wide_features(report["system_info"]) == [], "an AVX-512/AMX build is installed: run `make llama`"


def test_a_crash_in_the_probe_is_a_clear_error_not_a_dead_process():
    command = [sys.executable, "-c", CRASH]
    with pytest.raises(EngineError) as err:
        llama_check.check_llama(command)
    message = str(err.value)
    assert "SIGILL (Illegal instruction)" in message
    assert llama_check.REBUILD in message and "arena doctor" in message


def test_the_signal_names():
    assert llama_check.describe_death(-4).startswith("SIGILL")
    assert llama_check.describe_death(-11).startswith("SIGSEGV")
    assert llama_check.describe_death(3) == "exit code 3"


@pytest.fixture
def crashing_llama(tmp_path):
    """An environment whose llama_cpp dies with SIGILL on import, as a build for another CPU does at its first token."""
    fake = tmp_path / "fake" / "llama_cpp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(CRASH)
    return {**os.environ, "PYTHONPATH": str(fake.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_arena_run_on_a_crashing_library_exits_2_with_the_fix(tmp_path, crashing_llama):
    cfg = write_config(tmp_path / "c.yaml", """
name: crash
tasks: {n: 3}
models:
  - {name: a, engine: llamacpp, model: bundled, mode: completion, params: {max_tokens: 4}}
  - {name: b, engine: llamacpp, model: bundled, mode: completion, params: {max_tokens: 5}}
""")
    proc = subprocess.run([*ARENA, "run", str(cfg), "-w", str(tmp_path / "ws")], capture_output=True, text=True,
                          env=crashing_llama, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Illegal instruction" in proc.stderr and "llama_build --rebuild" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_doctor_reports_a_crashing_library_and_exits_2(crashing_llama):
    proc = subprocess.run([*ARENA, "doctor", "--json"], capture_output=True, text=True, env=crashing_llama, timeout=300)
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["smoke_generation"]["ok"] is False
    assert "Illegal instruction" in report["smoke_generation"]["error"]


@pytest.mark.slow  # loads the bundled model
def test_doctor_json_has_what_a_bug_report_needs():
    proc = subprocess.run([*ARENA, "doctor", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["python"]["version"].startswith("3.")
    assert report["os"]["platform"]
    assert report["cpu"]["model"] and isinstance(report["cpu"]["flags"], list)
    assert "AVX2 = 1" in report["llama_cpp"]["system_info"] and report["llama_cpp"]["portable"] is True
    assert report["smoke_generation"]["ok"] is True
    assert report["torch"]["version"].startswith("2.13") and report["torch"]["threads"] >= 1
    assert report["bundled_model"]["identity"].startswith("sha256:") and os.path.isfile(report["bundled_model"]["path"])


@pytest.mark.slow  # loads the bundled model
def test_a_success_is_cached_per_build(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path))
    monkeypatch.setattr(llama_check, "_passed", False)
    monkeypatch.setattr(llama_check, "_failure", None)
    monkeypatch.setattr("arena_learning.engines.bundled.bundled_model_path",
                        lambda: __import__("pathlib").Path(os.environ["HOME"])
                        / ".cache/arena-learning/gemma3-270m-q4_k_m.gguf")
    first = llama_check.check_llama()
    assert first["ok"] and first["cached"] is False
    assert list((tmp_path / "llama-check").glob("*.json"))
    monkeypatch.setattr(llama_check, "_passed", False)
    again = llama_check.check_llama()
    assert again["cached"] is True


@pytest.mark.slow
def test_a_failing_report_keeps_the_finished_run(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", """
name: keep
tasks: {n: 6, seed: 2}
models:
  - {name: a, engine: llamacpp, model: bundled, mode: completion, n_threads: 2, params: {max_tokens: 6, stop: ["\\n"]}}
  - name: b
    engine: llamacpp
    model: bundled
    mode: completion
    n_threads: 2
    prompt_format: {few_shot: [["What is 12 + 7?", "19"]]}
    params: {max_tokens: 6, stop: ["\\n"]}
ratings: {bootstrap: 10}
""")
    ws = tmp_path / "ws"
    (ws / "report.html").mkdir(parents=True)  # the report cannot be written there
    proc = arena("run", cfg, "-w", ws, "--json")
    assert proc.returncode == 0, proc.stderr
    board = json.loads(proc.stdout)
    assert {r["model"] for r in board} == {"a", "b"}
    assert "the HTML report failed" in proc.stderr and f"arena report {ws}" in proc.stderr
    again = arena("leaderboard", ws, "--json")
    assert json.loads(again.stdout) == board


def test_the_results_log_names_the_machine_as_the_llama_check_does():
    # one reader of /proc/cpuinfo (llama_check.cpu_info) for the check, the speed records and the results log
    results = load_benchmark("results")
    info = llama_check.cpu_info()
    assert results.machine() == f"{os.cpu_count()} cores, {info['model']}" and info["model"]
