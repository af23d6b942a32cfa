"""The how-to guides (docs/guides/) stay true to the CLI and their configs run.

Every `arena ...` command a guide shows names an existing command with existing options; every YAML
snippet validates; every guide's config in examples/ is planned with `arena plan`; the offline ones run
small: the endpoints and the judge of examples/rate-endpoints.yaml are `arena serve` processes over the
bundled model on 127.0.0.1, the chat logs are the ShareGPT sample in ../shared/data, and the leaderboard
guide's commands run on a small quickstart run and on the small workspace the endpoint run leaves.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from arena_learning.cli import app
from arena_learning.config import JudgeConfig, ModelSpec, PromptsConfig, RunConfig, SpendLimit, load_config_file
from arena_learning.curate.settings import PoolConfig, TestsetConfig
from arena_learning.flywheel.settings import FlywheelConfig, SliceSpec, TrainingConfig

from .conftest import ARENA, free_port, shared, wait_for_port
from .doc_commands import code_blocks, expand, options, page_commands, resolve

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ROOT / "docs" / "guides"
EXAMPLES = ROOT / "examples"
PAGES = ["rate-endpoints.md", "logs-to-testset.md", "flywheel-my-model.md", "read-a-leaderboard.md", "batch.md"]
CONFIGS: dict[str, list[tuple[str, type]]] = {
    "rate-endpoints.md": [("rate-endpoints.yaml", RunConfig)],
    "logs-to-testset.md": [("logs-testset.yaml", TestsetConfig), ("logs-pool.yaml", PoolConfig)],
    "flywheel-my-model.md": [("flywheel-my-model.yaml", FlywheelConfig)],
    "read-a-leaderboard.md": [],
    "batch.md": [("batch-judge.yaml", RunConfig)],
}
SHAREGPT = ("sharegpt_sample", "dummy_conversation.json")

runner = CliRunner()


def invoke(*args: str) -> Any:
    res = runner.invoke(app, list(args), terminal_width=200)
    assert res.exit_code == 0, f"arena {' '.join(args)} failed:\n{res.output}"
    return res


# ---- the pages --------------------------------------------------------------------------------------------


def test_every_guide_is_in_the_nav_and_ends_in_its_config():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"guides/{page}" in nav, f"{page} is not in mkdocs.yml's nav"
        text = (GUIDES / page).read_text(encoding="utf-8")
        for name, _ in CONFIGS[page]:
            block = f"<!-- generated: config-{name.removesuffix('.yaml')} "
            assert block in text, f"{page} does not show examples/{name} (a generated config block)"


@pytest.mark.parametrize("page", PAGES)
def test_every_command_a_guide_shows_exists_with_its_options(page):
    lines = page_commands(GUIDES / page)
    assert lines, f"{page} shows no arena command"
    for line in lines:
        for path, used in expand(line):
            cmd, found = resolve(path)
            assert found == path and not hasattr(cmd, "commands"), f"{page}: {line!r} names no arena command"
            unknown = used - options(cmd)
            assert not unknown, f"{page}: {line!r}: {sorted(unknown)} are not options of arena {' '.join(path)}"


def test_every_example_a_guide_names_exists():
    for page in PAGES:
        for name in re.findall(r"examples/[\w.-]+\.yaml", (GUIDES / page).read_text(encoding="utf-8")):
            assert (ROOT / name).is_file(), f"{page} names {name}, which does not exist"


SNIPPET_KEYS: dict[str, Any] = {
    "models": lambda v: [ModelSpec.model_validate(m) for m in v],
    "judge": JudgeConfig.model_validate,
    "target": ModelSpec.model_validate,
    "training": TrainingConfig.model_validate,
    "prompts": PromptsConfig.model_validate,
    "pool": lambda v: [SliceSpec.model_validate(s) for s in v.values()],
    "workspace": lambda v: isinstance(v, str) or pytest.fail(f"workspace {v!r} is not a path"),
    "spend_limit": SpendLimit.model_validate,
}


@pytest.mark.parametrize("page", PAGES)
def test_every_yaml_snippet_of_a_guide_validates(page):
    text = re.sub(r"<!-- generated: .*?<!-- end generated -->", "", (GUIDES / page).read_text(encoding="utf-8"),
                  flags=re.S)  # a guide's complete config: the example file itself, loaded below
    for lang, body in code_blocks(text):
        if lang != "yaml" or body.startswith("--8<--"):
            continue
        data = yaml.safe_load(body)
        if "name" in data and "models" in data:  # a whole run config
            RunConfig.model_validate(data)
            continue
        for key, value in data.items():
            assert key in SNIPPET_KEYS, f"{page}: a YAML snippet with a key this test does not check: {key}"
            SNIPPET_KEYS[key](value)


def test_the_guides_configs_load_and_have_their_own_names():
    names: dict[str, str] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        name = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("name")
        if name is not None:
            names.setdefault(name, path.name)
    for configs in CONFIGS.values():
        for file, cls in configs:
            cfg = load_config_file(EXAMPLES / file, cls)
            if hasattr(cfg, "name"):
                assert names[cfg.name] == file, f"examples/{file} shares its name {cfg.name!r} with {names[cfg.name]}"


# ---- 1. rate models behind endpoints ----------------------------------------------------------------------

BASELINE_ANSWERS = ("arena-hard-v0.1", "model_answer", "gpt-4-0314.jsonl")
# Four arena-hard questions with short baseline answers: a judge on two cores reads them in seconds.
SHORT = ("328c149ed45a41c0b9d6f14659e63599", "b73a766af676460dabf4a58788c10b29", "38506f6f76c34b8ab8aec6223eee2548",
         "bc59fa595d8541ff8e850851b238cc03")


def _questions(tmp: Path) -> Path:
    out = tmp / "questions.jsonl"
    lines = shared("arena-hard-v0.1", "question.jsonl").read_text(encoding="utf-8").splitlines()
    out.write_text("".join(line + "\n" for line in lines if json.loads(line)["uid"] in SHORT), encoding="utf-8")
    return out


def test_rate_endpoints_is_planned_with_its_cost(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ws = tmp_path / "ws"
    invoke("import-answers", str(shared(*BASELINE_ANSWERS)), "-w", str(ws))
    res = invoke("plan", str(EXAMPLES / "rate-endpoints.yaml"), "-w", str(ws), "--json",
                 "--set", f"prompts.path={_questions(tmp_path)}")
    plan = json.loads(res.stdout)
    calls = {(x["step"], x["model"]): x for x in plan["lines"]}
    assert calls["answer", "mine-v1"]["calls"] == calls["answer", "mine-v2"]["calls"] == 4
    assert calls["answer", "gpt-4-0314"]["calls"] == 0  # imported: nothing to ask
    judge = calls["judge", "gpt-4o-arena-hard"]
    assert judge["calls"] == 2 * 4 * 2  # two models against the baseline, four prompts, both orders
    assert judge["cost"] > 0  # priced from price_in / price_out
    assert judge["cost_batch"] == pytest.approx(judge["cost"] / 2, abs=1e-6)  # the Batch API's price: half
    assert plan["totals"]["cost_batch"] == pytest.approx(plan["totals"]["cost"] / 2, abs=1e-6)


SERVE = """
models:
  - name: mine-v1                 # the bundled base model with one worked example
    engine: llamacpp
    model: bundled
    mode: completion
    n_threads: 1
    prompt_format:
      few_shot:
        - ["How can I sleep better?", "Keep a regular schedule, avoid caffeine after noon, keep the bedroom dark."]
    params: {max_tokens: 32, stop: ["\\nQuestion:"]}
  - name: mine-v2                 # the same weights, zero-shot
    engine: llamacpp
    model: bundled
    mode: completion
    n_threads: 1
    params: {max_tokens: 32, stop: ["\\nQuestion:"]}
  - name: judge                   # a base model that answers in arena-hard's labels, from four examples
    engine: llamacpp
    model: bundled
    mode: completion
    n_ctx: 4096
    n_threads: 1
    prompt_format:
      few_shot:
        - ["Which answer is better? A: Paris. B: Lyon. The question: the capital of France.", "[[A>>B]]"]
        - ["Which answer is better? A: 4. B: 5. The question: 2 + 2.", "[[A>B]]"]
        - ["Which answer is better? A: blue. B: blue. The question: the colour of the sky.", "[[A=B]]"]
        - ["Which answer is better? A: 3. B: 12. The question: 3 x 4.", "[[B>>A]]"]
    params: {max_tokens: 12, stop: ["\\n"]}
"""


@pytest.fixture(scope="module")
def endpoint_run(module_tmp):
    """examples/rate-endpoints.yaml run small: its two endpoints and its judge are `arena serve` processes on
    127.0.0.1 (keys required, read from the variables the config names), four arena-hard questions, the
    baseline's published answers imported. Returns the workspace and the run's output."""
    questions = _questions(module_tmp)
    serve_cfg = module_tmp / "serve.yaml"
    serve_cfg.write_text(SERVE, encoding="utf-8")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MY_ENDPOINT_KEY": "endpoint-key", "OPENAI_API_KEY": "judge-key"}
    procs, urls = [], {}
    try:
        for name, key in (("mine-v1", "MY_ENDPOINT_KEY"), ("mine-v2", "MY_ENDPOINT_KEY"), ("judge", "OPENAI_API_KEY")):
            port = free_port()
            procs.append(subprocess.Popen([*ARENA, "serve", "--config", str(serve_cfg), "--model", name, "--port",
                                           str(port), "--api-key-env", key], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            urls[name] = f"http://127.0.0.1:{port}/v1"
        for proc, url in zip(procs, urls.values()):
            wait_for_port(int(url.rsplit(":", 1)[1].split("/")[0]), proc)
        ws = module_tmp / "ws"
        subprocess.run([*ARENA, "import-answers", str(shared(*BASELINE_ANSWERS)), "-w", str(ws)], check=True,
                       env=env, capture_output=True)
        sets = [f"prompts.path={questions}", f"judge.model.base_url={urls['judge']}", "judge.model.model=judge",
                "judge.sampling.max_tokens=12", "ratings.bootstrap=20"]
        for name in ("mine-v1", "mine-v2"):
            sets += [f"models.{name}.base_url={urls[name]}", f"models.{name}.model={name}",
                     f"models.{name}.params.max_tokens=32"]
        run = subprocess.run([*ARENA, "run", str(EXAMPLES / "rate-endpoints.yaml"), "-w", str(ws),
                              *(x for s in sets for x in ("--set", s))], env={**env, "COLUMNS": "200"},
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        yield ws, run.stdout + run.stderr
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.slow  # three model servers and a run: about a minute on two cores
def test_rate_endpoints_runs_small_through_served_endpoints_and_judge(endpoint_run):
    ws, out = endpoint_run
    assert re.search(r"rank\s+CI rank\s+model", out), out  # the run ends in its leaderboard
    board = json.loads(invoke("leaderboard", str(ws), "--json").stdout)
    ratings = {r["model"]: r["rating"] for r in board}
    assert set(ratings) == {"mine-v1", "mine-v2", "gpt-4-0314"} and ratings["gpt-4-0314"] == 1000.0  # the anchor
    res = invoke("leaderboard", str(ws), "--baseline", "gpt-4-0314", "--json")
    rows = json.loads(res.stdout)
    rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
    assert {r["model"] for r in rows} >= {"mine-v1", "mine-v2"}


# ---- 2. chat logs to a test set and a pool ----------------------------------------------------------------


@pytest.mark.slow  # embeds the sample twice with the bundled embedding model
def test_logs_become_a_test_set_and_a_pool_a_run_is_planned_on(tmp_path):
    logs = shared(*SHAREGPT)
    ws = tmp_path / "ws"
    small = ["--set", f"sources=[{{path: {logs}}}]", "--set", "embed.max_seq_length=128"]
    invoke("testset", "build", str(EXAMPLES / "logs-testset.yaml"), "-w", str(ws), "-q", *small,
           "--set", "diverse.n_clusters=6", "--set", "diverse.n_init=1", "--set", "diverse.projection=pca",
           "--set", "hard.top_n=0")
    invoke("pool", "build", str(EXAMPLES / "logs-pool.yaml"), "-w", str(ws), "-q", *small,
           "--set", "slices.n_slices=3", "--set", "slices.n_clusters=4")
    from arena_learning.store import Store

    with Store(ws) as store:
        sets = store.prompt_sets()
        mix = {p.id for p in store.get_prompts("testset/mix")}
        slices = [{p.id for p in store.get_prompts(f"pool/D{i}")} for i in range(3)]
    assert sets["testset/mix"] == 12  # 6 clusters x 2
    assert all(slices) and not any(a & b for i, a in enumerate(slices) for b in slices[i + 1:])
    assert not mix & set().union(*slices)  # decontaminated: no test prompt is in the pool
    assert (ws / "sets" / "testset" / "mix.jsonl").is_file()
    # The guide's run config, pointed at the test set, plans one answer per prompt and model.
    page = (GUIDES / "logs-to-testset.md").read_text(encoding="utf-8")
    run_cfg = next(yaml.safe_load(b) for lang, b in code_blocks(page) if lang == "yaml" and "models:" in b)
    run_cfg["workspace"] = str(ws)
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(run_cfg), encoding="utf-8")
    plan = json.loads(invoke("plan", str(cfg_path), "--json").stdout)
    turns = sum(len(json.loads(line)["turns"]) for line in (ws / "sets" / "testset" / "mix.jsonl").open())
    answers = [x for x in plan["lines"] if x["step"] == "answer"]
    calls = [x["calls"] for x in answers]
    assert len(calls) == 2 and calls[0] == calls[1] and 12 <= calls[0] <= turns  # a call per test prompt and turn


# ---- 3. the flywheel on my model --------------------------------------------------------------------------


def test_flywheel_my_model_is_planned_and_prints_its_launches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logs = shared(*SHAREGPT)
    for name in ("testset/mix", "pool/D0", "pool/D1", "pool/D2", "pool/D3"):
        invoke("ingest", str(logs), "--out", "workspaces/my-logs", "--set-name", name, "-q")
    folder = tmp_path / "models" / "my-model"  # planning reads no weights: a folder with a config is enough
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    config = str(EXAMPLES / "flywheel-my-model.yaml")
    plan = json.loads(invoke("plan", config, "--flywheel", "--json").stdout)
    stages = {x["stage"] for x in plan["lines"]}
    for key in ("r0.0-sft", "r1.0-sft", "r2.0-dpo", "r3.0-dpo"):
        assert any(key in s for s in stages), f"no plan line for {key}: {sorted(stages)}"
    trains = [x for x in plan["lines"] if x["step"] == "train"]
    assert len(trains) == 4
    page = (GUIDES / "flywheel-my-model.md").read_text(encoding="utf-8")
    one = invoke("flywheel", config, "--print-launch").stdout
    eight = invoke("flywheel", config, "--print-launch", "--set", "training.launch.accelerate_config=zero3",
                   "--set", "training.launch.num_processes=8").stdout
    for out, conf, n in ((one, "multi_gpu", 1), (eight, "zero3", 8)):
        assert out.count("accelerate launch") == 4
        assert f"accelerate_configs/{conf}.yaml --num_processes {n} --mixed_precision bf16" in out
        # the guide shows the first stage's command as printed (the install's paths elided)
        first = out.splitlines()[1]
        shown = first[first.index(" launch "):first.index("--config_file")] + "--config_file ..."
        assert shown in page and first[first.index("/scale/"):] in page.replace(".../scale/", "/scale/")


# ---- 4. read a leaderboard and a judge report ------------------------------------------------------------

LEADERBOARD = GUIDES / "read-a-leaderboard.md"
FAILING = "## When the canaries fail"


def _outputs(text: str) -> list[str]:
    return [body for lang, body in code_blocks(text) if lang == "text"]


def test_the_leaderboard_guide_teaches_on_the_quickstarts_run_and_shows_a_failing_judge_apart():
    """The walk-through reads workspaces/quickstart (examples/quickstart.yaml: its models, its test set, the
    verifier, canaries off by design); the LLM-judged run whose judge failed its canaries is only in the section
    on what to do then, with its FAILED manifest and its warning."""
    page = LEADERBOARD.read_text(encoding="utf-8")
    assert FAILING in page
    main, failing = page.split(FAILING, 1)
    main_ws = set(re.findall(r"workspaces/[\w.-]*\w", main))
    assert main_ws == {"workspaces/quickstart"}, main_ws
    assert "arena run examples/quickstart.yaml" in main  # the step that makes it
    quick = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text(encoding="utf-8"))
    assert quick["judge"]["kind"] == "verifier" and "workspace" not in quick and quick["name"] == "quickstart"
    board = _outputs(main)[0]
    shown = re.findall(r"^\s+\d+\s+\d+\s+(\S+)\s+\d", board, flags=re.M)
    assert sorted(shown) == sorted(m["name"] for m in quick["models"]), shown
    assert f"test set {quick['tasks']['n']} prompts" in board
    assert re.search(r"^manifest: judge verifier \(verifier\);.*canaries off", board, flags=re.M), board
    for body in _outputs(main):
        assert "FAILED" not in body and "failed its canaries" not in body, body
    failed = _outputs(failing)
    assert failed and "canaries FAILED" in failed[0] and "failed its canaries" in failed[0]
    assert set(re.findall(r"workspaces/[\w.-]*\w", failing)) == {"workspaces/rate-endpoints",
                                                                  "workspaces/quickstart"}
    assert "(rate-endpoints.md)" in failing.split("workspaces/rate-endpoints", 1)[0]  # the guide that makes it


@pytest.mark.slow  # the quickstart run small, and the endpoint run's workspace (the fixture above)
def test_the_leaderboard_guides_commands_run_on_small_workspaces(endpoint_run, tmp_path):
    """Every command the page gives to type runs: on workspaces/quickstart a small run of the quickstart (the
    page's outputs come from the full one), on workspaces/rate-endpoints the small endpoint workspace (its
    outputs come from such a run), a redirect written under tmp_path."""
    quick = tmp_path / "quickstart"
    proc = subprocess.run([*ARENA, "run", str(EXAMPLES / "quickstart.yaml"), "-w", str(quick), "--set", "tasks.n=24",
                           "--set", "ratings.bootstrap=10"], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wss = {"workspaces/quickstart": str(quick), "workspaces/rate-endpoints": str(endpoint_run[0])}
    ran = set()
    for lang, body in code_blocks(LEADERBOARD.read_text(encoding="utf-8")):
        if lang != "sh":
            continue
        for line in body.splitlines():
            command, _, redirect = line.partition(" > ")
            words = [wss[w] if w.startswith("workspaces/") else w for w in shlex.split(command)[1:]]
            words = [str(tmp_path / w) if w.endswith(".json") else w for w in words]
            res = invoke(*words)
            if redirect:
                (tmp_path / redirect.strip()).write_text(res.stdout, encoding="utf-8")
            ran.add(" ".join(expand(line)[0][0]))
    assert {"leaderboard", "judge-audit", "compare", "prompt-board"} <= ran
