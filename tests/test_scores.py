"""MT-Bench-style absolute scores (`arena scores`, the report's scores section): real MT-Bench questions,
a single-answer judge behind a real HTTP endpoint on 127.0.0.1 whose grades the test scripts."""

from __future__ import annotations

import json
import random
import re

import pytest
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.errors import ArenaError
from arena_learning.rating.scores import score_table
from arena_learning.records import Answer, Judgment, Prompt
from arena_learning.report.html import write_report
from arena_learning.store import Store

from .conftest import fenced, shared


def grading_judge(body):
    """Grades the answer shown as "grade N" with N; an answer saying UNGRADABLE gets a reply that never parses."""
    user = body["messages"][-1]["content"]

    def grade(name):
        found = re.search(r"grade (\d+)", fenced(user, name))
        return None if found is None else int(found.group(1))

    if "<<<ANSWER A " in user:  # a pairwise judge: the answer shown first gets a point more
        a, b = grade("ANSWER A"), grade("ANSWER B")
        return json.dumps({"explanation": "compared", "score_a": min(10, (a or 1) + 1), "score_b": b or 1})
    g = grade("ANSWER")
    return "I cannot say." if g is None else json.dumps({"explanation": "graded", "score": g})


@pytest.fixture
def judge(scripted_server):
    return scripted_server(grading_judge, usage=(10, 10))


def grades(model: str, prompt: Prompt) -> list[str]:
    if model == "strong":
        return ["grade 5", "grade 5"] if prompt.category == "roleplay" else ["grade 9", "grade 7"]
    if model == "mid":
        return ["grade 6", "grade 6"]
    return ["UNGRADABLE", "UNGRADABLE"] if prompt.id == "81" else ["grade 2", "grade 3"]


def mt_bench_workspace(tmp_path, url, template="single"):
    cfg = RunConfig.model_validate({
        "name": "mt", "prompts": {"path": str(shared("mt_bench", "question.jsonl")), "limit": 20},
        "models": [{"name": m, "engine": "imported"} for m in ("strong", "mid", "weak")],
        "judge": {"kind": "llm", "name": "grader", "template": template, "retries": 0,
                  "model": {"name": "judge", "engine": "openai", "model": "judge", "base_url": url}},
        "ratings": {"bootstrap": 20},
    })
    ws = tmp_path / "ws"
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        prompts = pipeline.stage_prompts(cfg, store)
        store.put_answers(Answer(prompt_id=p.id, model=m, turns=grades(m, p))
                          for p in prompts for m in ("strong", "mid", "weak"))
        pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
    return ws, prompts


def test_scores_per_model_turn_and_category_from_a_single_answer_judge(tmp_path, judge):
    ws, prompts = mt_bench_workspace(tmp_path, judge.url)
    assert {p.category for p in prompts} == {"writing", "roleplay"} and len(prompts) == 20
    assert judge.requests == 20 * 2 * 3  # each answer's turns graded once, whatever the pairs
    result = CliRunner().invoke(app, ["scores", str(ws), "--json", "-b", "200"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["judge"] == "grader"
    # the board's manifest: a single-answer judge's template, the test set's size and hash
    assert out["manifest"]["judge"]["template"].startswith("single") and out["manifest"]["test_set"]["prompts"] == 20
    rows = {r["model"]: r for r in out["models"]}
    assert [r["model"] for r in out["models"]] == ["strong", "mid", "weak"]
    strong, mid, weak = rows["strong"], rows["mid"], rows["weak"]
    assert strong["mean"] == pytest.approx(6.5) and strong["graded"] == 20 and strong["failed"] == 0
    assert strong["turns"] == {"1": {"mean": 7.0, "n": 20}, "2": {"mean": 6.0, "n": 20}}
    assert strong["categories"] == {"roleplay": {"mean": 5.0, "n": 20}, "writing": {"mean": 8.0, "n": 20}}
    assert strong["ci_low"] < 6.5 < strong["ci_high"] and strong["ci_low"] >= 5.0 and strong["ci_high"] <= 8.0
    assert mid["mean"] == 6.0 and mid["ci_low"] == mid["ci_high"] == 6.0
    # weak's answer to question 81 never got a grade: counted as failed, left out of the means
    assert weak["graded"] == 19 and weak["failed"] == 1 and weak["mean"] == pytest.approx(2.5)
    assert weak["turns"]["1"] == {"mean": 2.0, "n": 19}
    table = CliRunner().invoke(app, ["scores", str(ws), "-b", "50"])
    assert table.exit_code == 0, table.output
    assert re.search(r"strong\s+6\.50\s+\S+\s+7\.00 \(20\)\s+6\.00 \(20\)\s+20\s+0", table.stdout), table.stdout
    assert re.search(r"strong\s+5\.00 \(20\)\s+8\.00 \(20\)", table.stdout)  # per category: roleplay, writing
    assert "1 grading failed and left no grade" in table.output
    page = write_report(ws).read_text()
    assert "Scores (single-answer grading)" in page and "6.50" in page and "8.00" in page


def test_scores_refuse_a_pairwise_judge_and_name_the_fix(tmp_path, judge):
    ws, _ = mt_bench_workspace(tmp_path, judge.url, template="pairwise")
    result = CliRunner().invoke(app, ["scores", str(ws)])
    assert result.exit_code == 2
    assert "grades pairs" in result.output and "template: single" in result.output
    # the same judgments named outside the config are read, and found to be relative grades
    with Store(ws) as store:
        store.replace_judgments(["imported"], [j.model_copy(update={"judge": "imported"})
                                               for j in store.get_judgments("grader")])
    again = CliRunner().invoke(app, ["scores", str(ws), "--judge", "imported"])
    assert again.exit_code == 2 and "depend on the other answer" in again.output
    nobody = CliRunner().invoke(app, ["scores", str(ws), "--judge", "ghost"])
    assert nobody.exit_code == 2 and "no judgments by 'ghost'" in nobody.output


def test_verifier_scores_are_its_checker_grades_ten_for_a_right_answer(tmp_path):
    cfg = RunConfig.model_validate({
        "name": "v", "tasks": {"n": 30, "seed": 2},
        "models": [{"name": m, "engine": "imported"} for m in ("often", "seldom")], "ratings": {"bootstrap": 0},
    })
    ws = tmp_path / "ws"
    rng = random.Random(4)
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        prompts = pipeline.stage_prompts(cfg, store)
        answers = [Answer(prompt_id=p.id, model=m, turns=[p.reference[0] if rng.random() < s else "no idea"])
                   for p in prompts for m, s in (("often", 0.8), ("seldom", 0.3))]
        store.put_answers(answers)
        pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
    right = {m: 10 * sum(a.turns[0] != "no idea" for a in answers if a.model == m) / len(prompts)
             for m in ("often", "seldom")}
    result = CliRunner().invoke(app, ["scores", str(ws), "--json", "-b", "0"])
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in json.loads(result.stdout)["models"]}
    assert {m: r["mean"] for m, r in rows.items()} == pytest.approx(right)
    assert rows["often"]["ci_low"] is None and rows["often"]["graded"] == 30
    assert sum(c["n"] for c in rows["often"]["categories"].values()) == 30


def test_failed_judgment_leaves_an_answer_ungraded_only_if_no_other_pair_graded_it():
    ok = Judgment(prompt_id="p", model_a="x", model_b="y", judge="j", scores_a=[7.0, 5.0], scores_b=[4.0, 4.0])
    failed = Judgment(prompt_id="p", model_a="x", model_b="z", judge="j", status="failed")
    rows = {r.model: r for r in score_table([ok, failed], [Prompt(id="p", turns=["a", "b"], category="c")],
                                            bootstrap=10)}
    assert (rows["x"].mean, rows["x"].graded, rows["x"].failed) == (6.0, 1, 0)
    assert (rows["z"].mean, rows["z"].graded, rows["z"].failed) == (None, 0, 1)
    assert rows["z"].ci_low is None and list(rows) == ["x", "y", "z"]
    with pytest.raises(ArenaError, match="no judgments to score"):
        score_table([], [])


def test_fastchat_single_judgments_imported_give_the_show_result_table(tmp_path):
    """MT-Bench's published single grades (FastChat gpt-4_single.jsonl), imported without any run config,
    give FastChat show_result's numbers: the mean of every valid grade, per turn and per category."""
    questions = shared("mt_bench", "question.jsonl")
    ws = tmp_path / "ws"
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(questions), "--out", str(ws)]).exit_code == 0
    rng = random.Random(9)
    records, kept = [], []
    for qid in (81, 82, 111, 112):  # two writing, two math questions
        for model in ("vicuna-13b", "llama-13b"):
            for turn in (1, 2):
                score = rng.randint(1, 10)
                records.append({"question_id": qid, "model": model, "judge": ["gpt-4", "single-v1" if turn == 1
                                else "single-v1-multi-turn"], "user_prompt": "...", "judgment": f"Rating: [[{score}]]",
                                "score": score, "turn": turn, "tstamp": 1.0})
                kept.append((qid, model, turn, score))
    path = tmp_path / "gpt-4_single.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    imported = runner.invoke(app, ["import-judgments", str(path), "-w", str(ws)])
    assert imported.exit_code == 0, imported.output
    # The workspace's only judge needs no --judge.
    no_judge = runner.invoke(app, ["scores", str(ws), "--json"])
    result = runner.invoke(app, ["scores", str(ws), "--judge", "gpt-4", "--json"])
    assert result.exit_code == 0, result.output
    assert no_judge.exit_code == 0 and no_judge.stdout == result.stdout
    rows = {r["model"]: r for r in json.loads(result.stdout)["models"]}

    def mean(xs):
        return sum(xs) / len(xs)

    for model, row in rows.items():
        mine = [(q, t, s) for q, m, t, s in kept if m == model]
        assert row["mean"] == pytest.approx(mean([s for _, _, s in mine]))
        for t in (1, 2):
            assert row["turns"][str(t)]["mean"] == pytest.approx(mean([s for _, tt, s in mine if tt == t]))
        assert row["categories"]["math"]["mean"] == pytest.approx(mean([s for q, _, s in mine if q > 100]))
        assert row["graded"] == 4 and row["turns"]["2"]["n"] == 4 and row["categories"]["writing"]["n"] == 4
    # With two judges, it must be named.
    assert runner.invoke(app, ["import-judgments", str(path), "-w", str(ws), "--judge", "other"]).exit_code == 0
    two = runner.invoke(app, ["scores", str(ws)])
    assert two.exit_code == 2 and "--judge" in two.output and "gpt-4, other" in two.output
