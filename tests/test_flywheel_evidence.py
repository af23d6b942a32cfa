"""Paired evidence on a real workspace: the verifier judge on the built-in task suite with scripted answers.

`arena leaderboard WS --diff A B` (table and --json), and the flywheel's round table with each stage's and
round's paired delta, exact answers gained and lost, and the verbosity watch (terminal, --json, state, report).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.cli import app
from arena_learning.config import ModelSpec, RunConfig, validate_config
from arena_learning.flywheel.rounds import Flywheel
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.flywheel_state import SliceRecord, StageRecord, load_state, state_path
from arena_learning.rating.bt import RateOptions, leaderboard
from arena_learning.records import Answer
from arena_learning.store import Store
from arena_learning.tasks import check

REFS = ("ref-a", "ref-b")
BASE, R0, R1 = "student-base", "student-r0-sft", "student-r1-sft"
FLYWHEEL = {
    "name": "evidence",
    "tasks": {"n": 90, "seed": 0},
    "target": {"name": "student", "engine": "transformers", "model": "bundled", "mode": "completion"},
    "references": [{"name": m, "engine": "llamacpp", "model": "bundled", "mode": "completion"} for m in REFS],
    "judge": {"kind": "verifier"},
    "pool": {"D0": {"n": 6, "seed": 101}, "D1": {"n": 6, "seed": 102}},
    "rounds": [{"stages": [{"kind": "sft", "slice": "D0"}]}, {"stages": [{"kind": "sft", "slice": "D1"}]}],
    "ratings": {"bootstrap": 200, "seed": 1},
    "evaluate": "rounds",
}


def right_sets(n: int) -> dict[str, set[int]]:
    """Which test prompts each model answers right: round 0 gains 12 over the base, round 1 gains 6 and loses 1."""
    rng = np.random.default_rng(4)
    easy = rng.random(n)
    base = {i for i in range(n) if easy[i] < 0.3}
    r0 = base | set(rng.choice(sorted(set(range(n)) - base), size=12, replace=False).tolist())
    r1 = (r0 | set(rng.choice(sorted(set(range(n)) - r0), size=6, replace=False).tolist())) - {min(base)}
    return {"ref-a": {i for i in range(n) if easy[i] < 0.45}, "ref-b": {i for i in range(n) if easy[i] < 0.35},
            BASE: base, R0: r0, R1: r1}


def build_workspace(ws, cfg, run, save) -> dict:
    """Store ``run``'s test set, five models' scripted answers and the real verifier's battles in ``ws``."""
    right = right_sets(90)
    with Store(ws) as store:
        save(store)
        prompts = pipeline.stage_prompts(run, store)
        assert len(prompts) == 90
        answers = []
        for m, ok in right.items():
            # round 1 pads its wrong answers: longer, and no more right
            pad = " - I am not sure, but I think about it for a long while and give this answer" if m == R1 else ""
            for i, p in enumerate(prompts):
                text = p.reference[0] if i in ok else "I do not know" + pad
                answers.append(Answer(prompt_id=p.id, model=m, turns=[text], tokens_out=len(text.split())))
        store.put_answers(answers)
        pipeline.stage_battle(run, store, prompts=prompts, show_progress=False)
        battles = store.get_battles("verifier")
    assert all((check(p, [p.reference[0]]) == 10) for p in prompts)  # a reference answer is an exact answer
    return {"ws": ws, "cfg": cfg, "prompts": prompts, "right": right, "battles": battles}


@pytest.fixture(scope="module")
def task_ws(module_tmp):
    """A flywheel workspace's test set (its config saved as the flywheel saves it, no arena run config)."""
    cfg = validate_config(json.loads(json.dumps(FLYWHEEL)), FlywheelConfig, "test")
    run = cfg.arena_config([ModelSpec(name=m, engine="imported") for m in right_sets(90)])
    return build_workspace(module_tmp / "ws", cfg, run,
                           lambda store: pipeline.save_config(cfg, store, "flywheel_config", "flywheel.resolved.yaml"))


def per_category(task_ws, model: str, other: str) -> dict[str, tuple[int, int]]:
    prompts, right = task_ws["prompts"], task_ws["right"]
    out: dict[str, tuple[int, int]] = {}
    for i, p in enumerate(prompts):
        g, lo = out.get(p.category, (0, 0))
        out[p.category] = (g + (i in right[model] and i not in right[other]),
                           lo + (i in right[other] and i not in right[model]))
    return out


def test_leaderboard_diff_gives_the_paired_delta_head_to_head_and_exact_answers_per_category(task_ws):
    res = CliRunner().invoke(app, ["leaderboard", str(task_ws["ws"]), "--diff", R0, BASE, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    ratings = {r.model: r.rating for r in leaderboard(task_ws["battles"], RateOptions(bootstrap=200, seed=1))}
    d = out["delta"]
    # the flywheel's own rating settings (bootstrap 200, seed 1), and the leaderboard's point ratings
    assert out["settings"]["bootstrap"] == 200 and out["settings"]["seed"] == 1 and out["rounds"] == 200
    assert d["rating"] == pytest.approx(ratings[R0] - ratings[BASE])
    assert 0 < d["ci_low"] < d["rating"] < d["ci_high"] and out["p_better"] == 1.0
    assert out["head_to_head"] == {"wins": 12, "losses": 0, "ties": 78, "shared_prompts": 90}
    e = out["exact"]
    assert (e["n"], e["of"], e["gained"], e["lost"]) == (len(task_ws["right"][R0]), 90, 12, 0)
    assert out["exact_other"]["n"] == len(task_ws["right"][BASE]) and out["exact_other"]["gained"] == 0
    want = per_category(task_ws, R0, BASE)
    assert {c: (x["gained"], x["lost"]) for c, x in e["per_category"].items()} == want
    assert sum(x["of"] for x in e["per_category"].values()) == 90
    # the table says the same
    res = CliRunner().invoke(app, ["leaderboard", str(task_ws["ws"]), "--diff", R1, R0])
    assert res.exit_code == 0, res.output
    assert "rating difference" in res.stdout and "+6 -1" in res.stdout and "6 won, 1 lost, 83 tied" in res.stdout


def test_leaderboard_diff_of_an_arena_run_uses_its_rating_settings_and_its_leaderboard(tmp_path):
    run = RunConfig.model_validate({"name": "arena", "tasks": {"n": 90, "seed": 0},
                                    "models": [{"name": m, "engine": "imported"} for m in right_sets(90)],
                                    "ratings": {"bootstrap": 50, "seed": 3, "anchor": "ref-b"}})
    got = build_workspace(tmp_path / "ws", None, run, lambda store: pipeline.save_config(run, store))
    res = CliRunner().invoke(app, ["leaderboard", str(got["ws"]), "--diff", "ref-a", R1, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["settings"] == {"bootstrap": 50, "resample": "prompt", "seed": 3, "ci": 0.95, "anchor": "ref-b"}
    board = {r.model: r.rating for r in pipeline.workspace_board(got["ws"])}  # what `arena leaderboard WS` prints
    assert out["delta"]["rating"] == pytest.approx(board["ref-a"] - board[R1])
    assert out["rounds"] == 50 and out["judge"] == "verifier"


@pytest.mark.parametrize("args,message", [
    (["--diff", R0, "nobody"], "'nobody' has no battles here; the models are: ref-a, ref-b, student-base"),
    (["--diff", R0, R0], "not 'student-r0-sft' with itself"),
    (["--diff", R0, BASE, "--by", "category"], "--diff compares two models: it goes without --by"),
])
def test_leaderboard_diff_refuses_what_it_cannot_compare_with_exit_2(task_ws, args, message):
    res = CliRunner().invoke(app, ["leaderboard", str(task_ws["ws"]), *args])
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


def test_the_flywheel_table_json_and_state_carry_paired_deltas_exact_answers_and_verbosity(task_ws, capsys):
    from arena_learning.cli.flywheel import print_report
    from arena_learning.report.html import _flywheel_html

    cfg = task_ws["cfg"]
    with Store(task_ws["ws"]) as store:
        said: list[str] = []
        fw = Flywheel(cfg, store, show_progress=False, say=said.append)
        recs = [StageRecord(key=f"r{r}.0-sft", round=r, kind="sft", slice=f"D{r}", model=m, status="done")
                for r, m in ((0, R0), (1, R1))]
        fw.started_from = {"r0.0-sft": BASE, "r1.0-sft": R0}  # as run_stage records them
        fw.state.stages = {x.key: x for x in recs}
        fw.state.slices = {"D0": SliceRecord(prompts=10, dropped_as_test=2,
                                             dropped_near_test={"contaminated_embedding": 2}),
                           "D1": SliceRecord(prompts=12)}
        ratings = leaderboard(task_ws["battles"], RateOptions(**cfg.ratings.model_dump()))
        spec = {m: cfg.target.model_copy(update={"name": m}) for m in (R0, R1)}
        rep = fw.report(ratings, [(0, spec[R0], [recs[0]]), (1, spec[R1], [recs[1]])], recs, 1.0)
    by = {r.model: r for r in ratings}
    r0, r1 = rep.rounds
    # the ratings are the leaderboard's to the digit; the deltas are paired differences of them
    assert (r0.rating, r1.rating, rep.base.rating) == (round(by[R0].rating, 2), round(by[R1].rating, 2),
                                                       round(by[BASE].rating, 2))
    assert r0.delta_prev.vs == BASE and r0.delta_prev.rating == pytest.approx(by[R0].rating - by[BASE].rating, abs=0.01)
    assert r0.delta_prev.ci_low > 0 and r0.delta_prev.p_better == 1.0
    assert r1.delta_prev.vs == R0 and r1.delta_prev.ci_low < r1.delta_prev.rating < r1.delta_prev.ci_high
    assert r1.delta_base.vs == BASE and r1.delta_best_ref.vs == "ref-a"
    assert r1.delta_best_ref.rating == pytest.approx(by[R1].rating - by["ref-a"].rating, abs=0.01)
    assert (r1.exact.n, r1.exact.gained, r1.exact.lost, r1.exact.vs) == (len(task_ws["right"][R1]), 6, 1, R0)
    assert {c: (x.gained, x.lost) for c, x in r1.exact.per_category.items()} == per_category(task_ws, R1, R0)
    assert rep.stages[1].delta_prev == r1.delta_prev and rep.stages[0].exact == r0.exact
    assert rep.base.exact.n == len(task_ws["right"][BASE]) and rep.base.exact.gained is None
    # the verbosity watch: round 1's padded answers are longer; the style-controlled rating sits beside the plain
    assert r1.mean_chars > r0.mean_chars and r1.mean_tokens > r0.mean_tokens
    assert all(x.style_rating is not None for x in (r0, r1, rep.base, *rep.references)), said
    out = json.loads(json.dumps(rep.as_json()))
    row = out["rounds"][1]
    assert {"rating", "ci_low", "ci_high"} <= set(row["delta_prev"]) and row["delta_prev"]["vs"] == R0
    assert row["exact"]["per_category"]["arithmetic"].keys() >= {"n", "gained", "lost"}
    assert {"delta_prev", "delta_base", "delta_best_ref", "exact", "mean_chars", "style_rating"} <= set(
        out["stages"][0])
    assert out["references"][0]["exact"]["n"] == len(task_ws["right"]["ref-a"])
    # kept in the state, so the report shows them
    state = load_state(state_path(task_ws["ws"]))
    assert state.last_report.rounds[1].delta_prev == r1.delta_prev
    assert state.stages["r1.0-sft"].exact == r1.exact
    html = _flywheel_html(task_ws["ws"])
    assert "Paired deltas" in html and "Verbosity watch" in html and f"{r1.delta_prev.rating:+.1f}" in html
    # what decontamination dropped from each slice, by reason, and the stages each slice fed
    assert "Slices and decontamination" in html and '<td class="">embedding 2</td>' in html
    # the data each model supplied: a row per model (those with none left out), a column per stage, a total
    rep.stages[0].by_model, rep.stages[1].by_model = {"ref-a": 4, "nobody": 0}, {"ref-a": 2, "ref-b": 5}
    print_report(rep)
    text = capsys.readouterr().out
    harvested = text[text.index("data harvested per model"):]
    assert re.search(r"model\s+r0\.0-sft\s+r1\.0-sft\s+total", harvested)
    assert re.search(r"ref-a\s+4\s+2\s+6 *\n", harvested) and re.search(r"ref-b\s+0\s+5\s+5 *\n", harvested)
    assert "nobody" not in harvested and harvested.index("ref-a") < harvested.index("ref-b")  # most data first
    assert re.search(r"D0\s+10\s+2\s+embedding 2\s+r0\.0-sft", text) and re.search(r"D1\s+12\s+0\s+-\s+r1\.0-sft", text)
    assert "paired deltas" in text and "verbosity watch" in text and "exact answers per category" in text
    assert f"{r0.delta_prev.rating:+.1f} [{r0.delta_prev.ci_low:+.0f}, {r0.delta_prev.ci_high:+.0f}]" in text
