"""`arena leaderboard WS --by category|cluster|subset`: one board per group of prompts, each the
Bradley-Terry fit of that group's battles alone; real arena-hard questions and answers."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.arena.imports import read_answers
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.rating.bt import leaderboard
from arena_learning.rating.export import ratings_to_json
from arena_learning.rating.groups import group_battles, prompt_groups
from arena_learning.records import Battle, Prompt
from arena_learning.store import Store

from .conftest import shared

MODELS = ("gpt-3.5-turbo-0125", "gpt-4-0314", "gpt-4-0613")


def longer_wins(prompts, answers):
    """Return battles judged by length (a stand-in judge: the grouping, not the judge, is under test)."""
    text = {(a.prompt_id, a.model): a.turns[0] for a in answers}
    out = []
    for p in prompts:
        for a, b in itertools.combinations(MODELS, 2):
            la, lb = len(text[(p.id, a)]), len(text[(p.id, b)])
            outcome = "tie" if abs(la - lb) < 50 else ("model_a" if la > lb else "model_b")
            out.append(Battle(prompt_id=p.id, model_a=a, model_b=b, outcome=outcome, judge="verifier"))
    return out


@pytest.fixture
def arena_hard_ws(tmp_path):
    root = shared("arena-hard-v0.1")
    cfg = RunConfig.model_validate({
        "name": "ah", "prompts": {"path": str(root / "question.jsonl"), "limit": 40},
        "models": [{"name": m, "engine": "imported"} for m in MODELS], "ratings": {"bootstrap": 30, "seed": 2},
    })
    ws = tmp_path / "ws"
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        prompts = pipeline.stage_prompts(cfg, store)
        ids = {p.id for p in prompts}
        answers = [a for a in read_answers([root / "model_answer" / f"{m}.jsonl" for m in MODELS]).answers
                   if a.prompt_id in ids]
        assert len(answers) == 3 * 40
        store.put_answers(answers)
        battles = longer_wins(prompts, answers)
        store.replace_battles("verifier", battles)
    return ws, cfg, prompts, battles


def test_by_cluster_gives_each_arena_hard_topic_its_own_board(arena_hard_ws):
    ws, cfg, prompts, battles = arena_hard_ws
    result = CliRunner().invoke(app, ["leaderboard", str(ws), "--by", "cluster", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    clusters = sorted({p.meta["source_cluster"] for p in prompts})
    assert out["by"] == "cluster" and sorted(out["groups"]) == clusters and out["skipped"] == {}
    assert len(clusters) == 20  # arena-hard: two questions per topic
    r = cfg.ratings
    for name in clusters[:3]:
        ids = {p.id for p in prompts if p.meta["source_cluster"] == name}
        own = [b for b in battles if b.prompt_id in ids]
        assert len(own) == 2 * 3
        expected = leaderboard(own, bootstrap=r.bootstrap, resample=r.resample, seed=r.seed)
        assert out["groups"][name] == ratings_to_json(expected)
        assert sum(row["battles"] for row in out["groups"][name]) == 2 * len(own)


def test_by_category_and_subset_fall_back_to_the_source_and_the_table_names_each_group(arena_hard_ws):
    ws, _, prompts, _ = arena_hard_ws
    runner = CliRunner()
    cat = json.loads(runner.invoke(app, ["leaderboard", str(ws), "--by", "category", "--json"]).stdout)
    assert list(cat["groups"]) == ["arena-hard-v0.1"]
    # the whole set in one group: the same board as the plain leaderboard
    plain = json.loads(runner.invoke(app, ["leaderboard", str(ws), "--json"]).stdout)
    assert cat["groups"]["arena-hard-v0.1"] == plain
    sub = json.loads(runner.invoke(app, ["leaderboard", str(ws), "--by", "subset", "--json"]).stdout)
    assert list(sub["groups"]) == [prompts[0].source] and prompts[0].source.endswith("question")
    table = runner.invoke(app, ["leaderboard", str(ws), "--by", "cluster"])
    assert table.exit_code == 0
    assert f"cluster {prompts[0].meta['source_cluster']} (6 battles)" in table.stdout


def test_testset_halves_and_kmeans_clusters_take_precedence_and_bad_groupings_exit_2(tmp_path):
    p1 = Prompt(id="a", turns=["q"], source="pool", cluster="3", meta={"testset": ["diverse", "hard"],
                                                                        "source_cluster": "Topic"})
    p2 = Prompt(id="b", turns=["q"], source="pool", meta={"source_cluster": "Topic"})
    p3 = Prompt(id="c", turns=["q"])
    assert prompt_groups(p1, "subset") == ["diverse", "hard"] and prompt_groups(p2, "subset") == ["pool"]
    assert prompt_groups(p1, "cluster") == ["3"] and prompt_groups(p2, "cluster") == ["Topic"]
    assert prompt_groups(p3, "subset") == [] and prompt_groups(p3, "category") == []
    battles = [Battle(prompt_id=p, model_a="x", model_b="y", outcome="model_a") for p in "abc"]
    groups = group_battles(battles, [p1, p2, p3], "subset")
    assert {k: [b.prompt_id for b in v] for k, v in groups.items()} == {"diverse": ["a"], "hard": ["a"], "pool": ["b"]}

    cfg = RunConfig.model_validate({"name": "t", "tasks": {"n": 9, "seed": 1},
                                    "models": [{"name": m, "engine": "imported"} for m in ("x", "y")]})
    ws = tmp_path / "ws"
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        prompts = pipeline.stage_prompts(cfg, store)
        store.replace_battles("verifier", [Battle(prompt_id=p.id, model_a="x", model_b="y", outcome="model_a",
                                                  judge="verifier") for p in prompts])
    runner = CliRunner()
    bad = runner.invoke(app, ["leaderboard", str(ws), "--by", "colour"])
    assert bad.exit_code == 2 and "cannot group by 'colour'" in bad.output and "category, cluster, subset" in bad.output
    both = runner.invoke(app, ["leaderboard", str(ws), "--by", "category", "--csv", str(tmp_path / "x.csv")])
    assert both.exit_code == 2 and "goes without --style-control and --csv" in both.output
    none = runner.invoke(app, ["leaderboard", str(ws), "--by", "cluster"])
    assert none.exit_code == 2 and "no battle's prompt has a cluster" in none.output


def test_report_has_a_board_per_cluster_when_there_are_few(tmp_path):
    from arena_learning.report.html import write_report

    cfg = RunConfig.model_validate({"name": "t", "tasks": {"n": 30, "seed": 1}, "ratings": {"bootstrap": 10},
                                    "models": [{"name": m, "engine": "imported"} for m in ("x", "y", "z")]})
    ws = tmp_path / "ws"
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        prompts = [p.model_copy(update={"cluster": f"k{i % 3}"})
                   for i, p in enumerate(pipeline.stage_prompts(cfg, store))]
        store.put_prompts("test", prompts)
        store.replace_battles("verifier", [
            Battle(prompt_id=p.id, model_a=a, model_b=b, outcome="model_a" if (i + len(a)) % 3 else "model_b",
                   judge="verifier") for i, p in enumerate(prompts) for a, b in (("x", "y"), ("y", "z"), ("x", "z"))])
    page = write_report(ws).read_text()
    assert "3 prompt clusters" in page
    assert all(f"k{k} (30)" in page for k in range(3))  # 10 prompts x 3 pairs each
