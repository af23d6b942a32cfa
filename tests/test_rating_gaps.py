"""Per-group gaps with corrected CIs (rating/gaps.py), on synthetic battles whose true gaps are known."""

from __future__ import annotations

import re

import numpy as np
import pytest

from arena_learning.errors import ArenaError
from arena_learning.rating.gaps import adjust, group_gaps
from arena_learning.records import Battle, Prompt

MODELS = ["target", "m1", "m2", "m3"]


def synthetic(seed: int, groups: int = 8, per_group: int = 30, planted: dict[str, float] | None = None,
              strength: dict[str, float] | None = None) -> tuple[list[Battle], list[Prompt]]:
    """Every pair of MODELS battles once on each prompt, the winner drawn from Bradley-Terry strengths (Elo
    points); ``planted`` lowers the target's strength in the named groups by that many points."""
    rng = np.random.default_rng(seed)
    strength = strength or {"target": 0.0, "m1": 0.0, "m2": 0.0, "m3": 0.0}
    battles, prompts = [], []
    for g in range(groups):
        name = f"g{g:02d}"
        for i in range(per_group):
            pid = f"{name}-{i}"
            prompts.append(Prompt(id=pid, turns=[f"prompt {pid}"], category=name))
            for a in range(len(MODELS)):
                for b in range(a + 1, len(MODELS)):
                    ma, mb = MODELS[a], MODELS[b]
                    sa = strength[ma] - (planted or {}).get(name, 0.0) * (ma == "target")
                    sb = strength[mb] - (planted or {}).get(name, 0.0) * (mb == "target")
                    p_a = 1.0 / (1.0 + 10 ** ((sb - sa) / 400.0))
                    outcome = "model_a" if rng.random() < p_a else "model_b"
                    battles.append(Battle(prompt_id=pid, model_a=ma, model_b=mb, outcome=outcome))
    return battles, prompts


def workspace(ws, battles: list[Battle], prompts: list[Prompt], bootstrap: int):
    """Return ``ws``, a run's workspace holding ``prompts`` as its test set and ``battles`` as its verifier's."""
    from arena_learning import pipeline
    from arena_learning.config import RunConfig
    from arena_learning.store import Store

    cfg = RunConfig.model_validate({"name": "gaps", "tasks": {"n": 12},
                                    "models": [{"name": m, "engine": "imported"} for m in MODELS],
                                    "judge": {"kind": "verifier"}, "ratings": {"bootstrap": bootstrap, "seed": 1}})
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        store.put_prompts(pipeline.TEST_SET, prompts)
        store.replace_battles(cfg.judge.name, [b.model_copy(update={"judge": cfg.judge.name}) for b in battles])
    return ws


def test_a_planted_gap_is_found_first_with_the_prompts_it_lost():
    battles, prompts = synthetic(1, planted={"g03": 400.0})
    report = group_gaps(battles, prompts, "category", "target", bootstrap=200)
    first = report.groups[0]
    assert first.group == "g03" and first.verdict == "behind" and [g.group for g in report.behind] == ["g03"]
    assert first.best is not None and first.best.delta < -150 and first.best.ci_high is not None
    assert first.best.ci_high < 0 and first.best.p_adjusted is not None and first.best.p_adjusted < 0.05
    assert first.field is not None and first.field.delta < -150
    assert first.lost and all(pid.startswith("g03-") for pid in first.lost)
    assert first.prompts == 30 and first.battles == 30 * 6


def test_no_group_is_flagged_when_no_gap_is_planted_at_the_stated_error_rate():
    # Holm keeps the chance of any false flag over the 8 groups at alpha = 0.05: over 40 seeds, expect 2
    flagged = 0
    for seed in range(40):
        battles, prompts = synthetic(100 + seed)
        report = group_gaps(battles, prompts, "category", "target", bootstrap=100, seed=seed)
        flagged += any(g.verdict for g in report.groups)
    assert flagged <= 5  # P(X > 5) < 2% for X ~ Binomial(40, 0.05)


def test_without_a_correction_the_same_null_battles_flag_groups_more_often():
    raw = holm = 0
    for seed in range(15):
        battles, prompts = synthetic(300 + seed, groups=12)
        raw += sum(bool(g.verdict) for g in group_gaps(battles, prompts, "category", "target", bootstrap=100,
                                                        correction="none").groups)
        holm += sum(bool(g.verdict) for g in group_gaps(battles, prompts, "category", "target", bootstrap=100).groups)
    assert holm < raw


def test_small_groups_are_listed_apart_and_not_counted_in_the_correction():
    battles, prompts = synthetic(2, per_group=6)
    report = group_gaps(battles, prompts, "category", "target", bootstrap=50, min_prompts=10)
    assert {g.verdict for g in report.groups} == {"too small"} and all(g.best is None for g in report.groups)


def test_holm_matches_its_definition():
    assert adjust([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert adjust([0.01, 0.04], "bonferroni") == [0.02, 0.08]


def test_bad_input_says_what_to_do():
    battles, prompts = synthetic(3, groups=2)
    with pytest.raises(ArenaError, match="--target 'nobody' has no battles"):
        group_gaps(battles, prompts, "category", "nobody")
    with pytest.raises(ArenaError, match="bootstrap"):
        group_gaps(battles, prompts, "category", "target", bootstrap=0)


def test_the_cli_prints_the_gaps_of_a_workspace_behind_first(tmp_path):
    import json

    from typer.testing import CliRunner

    from arena_learning.cli import app

    battles, prompts = synthetic(4, groups=4, planted={"g02": 400.0})
    ws = workspace(tmp_path / "ws", battles, prompts, bootstrap=100)
    runner = CliRunner()
    res = runner.invoke(app, ["leaderboard", str(ws), "--by", "category", "--target", "target", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["groups"][0]["group"] == "g02" and out["groups"][0]["verdict"] == "behind"
    assert out["best_other"] in MODELS[1:] and out["correction"] == "holm"
    assert all(pid in out["prompt_texts"] for pid in out["groups"][0]["lost"])
    table = runner.invoke(app, ["leaderboard", str(ws), "--by", "category", "--target", "target"])
    assert table.exit_code == 0 and "g02" in table.stdout and "behind" in table.stdout
    bad = runner.invoke(app, ["leaderboard", str(ws), "--target", "target"])
    assert bad.exit_code == 2 and "--by" in bad.output


def test_a_names_file_labels_the_groups_of_a_board_and_of_the_gaps(tmp_path):
    import json

    from typer.testing import CliRunner

    from arena_learning.cli import app

    battles, prompts = synthetic(5, groups=2, per_group=12)
    prompts = [p.model_copy(update={"cluster": p.category}) for p in prompts]
    ws = workspace(tmp_path / "ws", battles, prompts, bootstrap=20)
    names = tmp_path / "names.yaml"
    names.write_text("g00: unit conversion\n")
    runner = CliRunner()
    board = runner.invoke(app, ["leaderboard", str(ws), "--by", "cluster", "--names", str(names), "--json"])
    assert board.exit_code == 0, board.output
    assert json.loads(board.stdout)["labels"] == {"g00": "unit conversion"}
    gaps = runner.invoke(app, ["leaderboard", str(ws), "--by", "cluster", "--target", "target", "--names",
                               str(names), "--json"])
    assert gaps.exit_code == 0, gaps.output
    assert {g["group"]: g["label"] for g in json.loads(gaps.stdout)["groups"]} == {"g00": "unit conversion",
                                                                                   "g01": None}


def test_the_reports_view_of_a_test_set_without_categories_is_by_cluster_under_its_labels():
    """A test set built from real prompts has clusters, no categories: the report's model x group view shows each
    cluster under its stored label, marks the planted gap, and names each cell's cluster as the battle browser
    names its group (a click picks it there)."""
    from arena_learning.rating.bt import leaderboard
    from arena_learning.report.browser import build_browser
    from arena_learning.report.strengths import strengths_html

    battles, prompts = synthetic(3, groups=4, planted={"g02": 400.0})
    clustered = [p.model_copy(update={"category": None, "cluster": f"c{p.category[1:]}",
                                      "meta": {"cluster_label": f"topic {p.category}"}}) for p in prompts]
    board = leaderboard(battles, bootstrap=0)
    html = strengths_html(board, battles, clustered, bootstrap=200, seed=0)
    assert 'data-by="cluster"' in html and "topic g02 (c02)" in html and "--by cluster --target" in html
    target_row = html.split('<td class="l">target</td>', 1)[1].split("</tr>", 1)[0]
    cells = dict(re.findall(r'data-cat="(c\d+)"[^>]*>([^<]*)</td>', target_row))
    assert sorted(cells) == ["c00", "c01", "c02", "c03"]
    assert cells["c02"].endswith("\u25bc") and not any(cells[c].endswith("\u25bc") for c in ("c00", "c01", "c03"))
    browser = build_browser(clustered, [], [], battles, MODELS)
    assert set(cells) <= set(browser.index["cats"])
    # with categories, the view is by category, as before
    assert 'data-by="category"' in strengths_html(board, battles, prompts, bootstrap=200, seed=0)
