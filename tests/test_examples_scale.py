"""The paper-scale example configs and docs/scale.md stay true to the code.

Each example is loaded with the real config loader (a renamed or removed key fails here, not in
a user's run), the commands docs/scale.md quotes are parsed and looked up in the real CLI (each
subcommand exists, takes ``--help``, and has every option the line uses), its YAML snippets
validate, and the arena plan it shows is recomputed from the public data.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from arena_learning.cli import app
from arena_learning.config import JudgeConfig, ModelSpec, RunConfig, load_config_file
from arena_learning.curate.settings import PoolConfig, TestsetConfig
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.scale.launch import launch_command

from .conftest import shared
from .doc_commands import code_blocks, page_commands, resolve

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "scale.md"
EXAMPLES = ROOT / "examples"

runner = CliRunner()


def _load(name: str, cls):
    return load_config_file(EXAMPLES / name, cls)


# ---- the example configs --------------------------------------------------------------------


def test_paper_testset_makes_2000_prompts_of_diverse_and_hard():
    cfg = _load("paper-testset.yaml", TestsetConfig)
    assert cfg.diverse.n_clusters * cfg.diverse.per_cluster == 1000
    assert cfg.hard.top_n == 1000 and cfg.hard.exclude_diverse  # no overlap: the mix is exactly 2,000
    assert cfg.hard.judge.engine == "openai" and len(cfg.hard.judge.base_urls) == 2


def test_paper_pool_cuts_nine_slices_decontaminated_against_the_test_set():
    pool = _load("paper-pool.yaml", PoolConfig)
    testset = _load("paper-testset.yaml", TestsetConfig)
    assert pool.slices.n_slices == 9
    assert pool.workspace == testset.workspace
    assert "testset/mix" in pool.decontam.test_sets


def test_paper_scale_runs_on_ray_with_vllm_models_and_a_served_judge():
    cfg = _load("paper-scale.yaml", RunConfig)
    testset = _load("paper-testset.yaml", TestsetConfig)
    # the JSONL copy `arena testset build` writes: WORKSPACE/sets/<set name>.jsonl
    assert cfg.prompts is not None and Path(cfg.prompts.path) == Path(testset.workspace) / "sets" / "testset/mix.jsonl"
    assert (cfg.scale.backend, cfg.scale.address) == ("ray", "auto")
    engines = {m.engine for m in cfg.models}
    assert engines == {"vllm", "openai"}
    for m in cfg.models:
        if m.engine == "vllm":
            assert m.engine_args["tensor_parallel_size"] == 1
            assert cfg.scale.models[m.name].num_gpus == 1  # one GPU per in-process vLLM actor
        if m.rpm or m.tpm:  # each actor keeps its own rate limiter: one actor keeps the limits exact
            assert cfg.scale.models[m.name].replicas == 1
    judge = cfg.judge.model
    assert cfg.judge.kind == "llm" and judge is not None and judge.engine == "openai" and len(judge.base_urls) == 2
    assert judge.name in cfg.scale.models
    assert any(m.api_key_env == "OPENAI_API_KEY" for m in cfg.models)


def test_paper_flywheel_reads_the_nine_slices_and_trains_with_zero3():
    cfg = _load("paper-flywheel.yaml", FlywheelConfig)
    testset = _load("paper-testset.yaml", TestsetConfig)
    assert cfg.workspace == testset.workspace
    assert cfg.prompts is not None and cfg.prompts.set == "testset/mix"
    assert {k: v.set for k, v in cfg.pool.items()} == {f"D{i}": f"pool/D{i}" for i in range(9)}
    used = [st.slice for r in cfg.rounds for st in r.stages]
    assert sorted(used) == sorted(cfg.pool) and len(set(used)) == 9  # every slice once
    assert cfg.scale.backend == "ray"
    argv = launch_command(cfg.training.launch, "job.json")
    assert "launch" in argv and argv[argv.index("--config_file") + 1].endswith("zero3.yaml")
    assert argv[argv.index("--num_processes") + 1] == "8"
    assert argv[argv.index("--mixed_precision") + 1] == "bf16"


# ---- the commands docs/scale.md quotes --------------------------------------------------------


def doc_commands() -> list[str]:
    """Return every `arena ...` command the page shows: in code blocks (continuations joined) and inline."""
    return page_commands(DOC)


def test_the_page_quotes_commands():
    cmds = doc_commands()
    names = {" ".join(resolve(shlex.split(c)[1:])[1]) for c in cmds}
    assert {"run", "plan", "flywheel", "ingest", "testset build", "pool build", "leaderboard"} <= names


@pytest.mark.parametrize("line", doc_commands())
def test_every_quoted_command_exists_with_its_options(line):
    tokens = shlex.split(line)[1:]
    cmd, path = resolve(tokens)
    assert path, f"docs/scale.md quotes {line!r}, which names no arena command"
    assert not hasattr(cmd, "commands"), f"{line!r} names the group {' '.join(path)!r}, not a command"
    res = runner.invoke(app, [*path, "--help"])
    assert res.exit_code == 0, res.output
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    used = {t.split("=", 1)[0] for t in tokens[len(path):] if t.startswith("-")}
    assert used <= known, f"{line!r}: {sorted(used - known)} are not options of arena {' '.join(path)}"


def test_the_pages_yaml_snippets_validate():
    blocks = [body for lang, body in code_blocks(DOC.read_text(encoding="utf-8")) if lang == "yaml"]
    assert blocks
    for body in blocks:
        data = yaml.safe_load(body)
        if isinstance(data, list):
            for item in data:
                ModelSpec.model_validate(item)
        else:
            assert set(data) == {"judge"}, f"a YAML snippet this test does not know how to check: {set(data)}"
            JudgeConfig.model_validate(data["judge"])


def test_the_page_names_only_existing_examples():
    named = set(re.findall(r"examples/[\w.-]+\.yaml", DOC.read_text(encoding="utf-8")))
    assert {"examples/paper-testset.yaml", "examples/paper-pool.yaml", "examples/paper-scale.yaml",
            "examples/paper-flywheel.yaml"} <= named
    assert all((ROOT / n).is_file() for n in named), sorted(n for n in named if not (ROOT / n).is_file())


# ---- the plan the page shows ------------------------------------------------------------------


def test_the_pages_arena_plan_is_what_plan_gives(tmp_path, monkeypatch):
    """Recompute the page's `arena plan examples/paper-scale.yaml` on the public prompts it names."""
    files = [shared(name, "question.jsonl") for name in ("arena-hard-v0.1", "mt_bench", "vicuna_bench")]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # as on the page: gpt-4o planned without a ledger check
    ws = tmp_path / "ws"
    res = runner.invoke(app, ["ingest", *map(str, files), "--out", str(ws), "-q"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["plan", str(EXAMPLES / "paper-scale.yaml"), "-w", str(ws), "--set", "prompts.path=null",
                              "--set", "prompts.set=ingested", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    judge = [x for x in plan["lines"] if x["step"] == "judge"]
    assert len(judge) == 1 and judge[0]["calls"] == 15 * 2 * 740  # 6 models: 15 pairs, both orders, 740 turns
    page = DOC.read_text(encoding="utf-8")
    for x in plan["lines"]:
        cached = r"\?" if x["cached"] is None else f"{x['cached']:,}"  # canaries: drawn when the answers exist
        row = (rf"test set\s+{x['step']}\s+{re.escape(x['model'])}\s+{x['calls']:,}\s+{cached}\s+"
               rf"{x['to_send']:,}\s+{x['tokens_in']:,}\s+{x['tokens_out']:,}")
        assert re.search(row, page), f"docs/scale.md's plan has no row {x}"
    assert f"{plan['totals']['calls']:,}" in page


@pytest.mark.slow
def test_the_pages_flywheel_plan_is_what_plan_gives(tmp_path):
    """Rebuild the page's test set and nine slices from the public data and recompute its flywheel plan."""
    test_files = [shared(name, "question.jsonl") for name in ("mt_bench", "vicuna_bench")]
    pool_file = shared("arena-hard-v0.1", "question.jsonl")
    ws = tmp_path / "ws"
    res = runner.invoke(app, ["ingest", *map(str, test_files), "--out", str(ws), "--set-name", "testset/mix", "-q"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["pool", "build", str(EXAMPLES / "paper-pool.yaml"), "-w", str(ws), "-q",
                              "--set", f"sources=[{{path: {pool_file}}}]", "--set", "slices.n_clusters=20"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["plan", str(EXAMPLES / "paper-flywheel.yaml"), "-w", str(ws), "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    page = DOC.read_text(encoding="utf-8")
    rows = [x for x in plan["lines"] if x["step"] != "train"]
    assert len(rows) == 85  # 72 answer and judge lines, and the canaries of the 13 battle steps
    for x in rows:
        cached = r"\?" if x["cached"] is None else f"{x['cached']:,}"  # canaries: drawn when the answers exist
        row = (rf"{re.escape(x['stage'])}\s+{x['step']}\s+{re.escape(x['model'])}\s+{x['calls']:,}\s+{cached}\s+"
               rf"{x['to_send']:,}\s+{x['tokens_in']:,}\s+{x['tokens_out']:,}")
        assert re.search(row, page), f"docs/scale.md's flywheel plan has no row {x}"
    tot = plan["totals"]
    assert re.search(rf"total\s+{tot['calls']:,}\s+{tot['cached']:,}\s+{tot['to_send']:,}", page)
