"""AlpacaEval: its output files import as answers that meet ingested AlpacaEval prompts, and the
length-controlled win rate (AlpacaEval 2's GLM) removes a win rate that length alone explains."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.arena.imports import read_answers
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.curate.ingest import ingest
from arena_learning.rating.boards import read_board
from arena_learning.rating.lengthcontrol import lc_win_rates
from arena_learning.records import Answer, Battle, Prompt
from arena_learning.report.html import write_report
from arena_learning.store import Store

from .conftest import fenced, shared

QUESTIONS = [
    {"dataset": "helpful_base", "instruction": "What are the names of some famous actors?", "output": "Tom Hanks.",
     "generator": "gpt4_turbo"},
    {"dataset": "koala", "instruction": "Summarise this text.", "input": "The cat sat on the mat.",
     "output": "A cat sat.", "generator": "gpt4_turbo"},
]


def synthetic(n: int, rng: np.random.Generator, models: dict[str, tuple[float, float]], slope: float = 1.5):
    """Return (battles, lengths): each model vs "ref" on ``n`` prompts; model: (quality, mean extra length)."""
    ref = rng.uniform(600, 1400, n)
    lengths = {(f"p{i}", "ref"): float(ref[i]) for i in range(n)}
    battles = []
    for model, (quality, extra) in models.items():
        delta = rng.normal(extra, 300, n)
        p = expit(quality + slope * np.tanh(delta / 300))
        won = rng.random(n) < p
        for i in range(n):
            lengths[(f"p{i}", model)] = float(ref[i] + delta[i])
            # the reference shown first on odd prompts: the sides must not matter
            a, b = (model, "ref") if i % 2 else ("ref", model)
            outcome = "model_a" if won[i] == (a == model) else "model_b"
            battles.append(Battle(prompt_id=f"p{i}", model_a=a, model_b=b, outcome=outcome))
    return battles, lengths


def test_length_alone_explains_the_raw_win_rate_and_lc_moves_to_50():
    rng = np.random.default_rng(7)
    battles, lengths = synthetic(805, rng, {"verbose": (0.0, 350.0)})
    (r,) = lc_win_rates(battles, lengths, "ref", bootstrap=200, seed=1)
    assert r.model == "verbose" and r.battles == 805 and r.prompts == 805
    assert r.win_rate > 65 and r.win_low > 55  # the judge's taste for length, taken for quality
    assert r.lc_low <= 50 <= r.lc_high and abs(r.lc_win_rate - 50) < 4
    assert r.lc_high - r.lc_low < 12
    assert r.length_coef == pytest.approx(1.5, abs=0.35)
    assert r.avg_length > r.reference_avg_length + 300


def test_a_weighted_battle_counts_as_that_many_battles():
    """arena-hard's strong verdicts (weight 3) weigh in the LC fit as in Bradley-Terry: as repeated rows."""
    rng = np.random.default_rng(3)
    battles, lengths = synthetic(120, rng, {"m": (0.4, 200.0)})
    strong = [i for i, b in enumerate(battles) if i % 4 == 0]
    weighted = [b.model_copy(update={"weight": 3}) if i in strong else b for i, b in enumerate(battles)]
    repeated = [x for i, b in enumerate(battles) for x in ([b] * (3 if i in strong else 1))]
    (w,) = lc_win_rates(weighted, lengths, "ref", bootstrap=20, seed=2)
    (r,) = lc_win_rates(repeated, lengths, "ref", bootstrap=20, seed=2)
    assert w == r and w.battles == 120 + 2 * len(strong)
    (plain,) = lc_win_rates(battles, lengths, "ref", bootstrap=0)
    assert plain.win_rate != w.win_rate


def test_lc_keeps_a_real_quality_gap_and_the_difficulty_term_comes_from_the_other_models():
    rng = np.random.default_rng(3)
    battles, lengths = synthetic(600, rng, {"better": (1.0, 0.0), "verbose": (0.0, 350.0), "terse": (0.0, -350.0)})
    rows = {r.model: r for r in lc_win_rates(battles, lengths, "ref", bootstrap=100, seed=0)}
    assert list(rows) == sorted(rows, key=lambda m: -rows[m].lc_win_rate)  # best LC first
    assert rows["better"].lc_low <= 100 * expit(1.0) <= rows["better"].lc_high
    assert rows["better"].lc_win_rate == pytest.approx(rows["better"].win_rate, abs=4)
    assert rows["terse"].win_rate < 40 and rows["terse"].lc_low <= 50 <= rows["terse"].lc_high
    assert rows["verbose"].lc_low <= 50 <= rows["verbose"].lc_high
    # instructions here have no difficulty of their own: its coefficient stays small
    assert all(abs(r.difficulty_coef) < 1.0 for r in rows.values())


def test_instruction_difficulty_shared_by_the_models_is_learned():
    rng = np.random.default_rng(5)
    n = 500
    hard = rng.normal(0, 1.5, n)
    lengths, battles = {}, []
    for i in range(n):
        lengths[(f"p{i}", "ref")] = 1000.0
    for model, quality in (("a", 0.5), ("b", 0.0), ("c", -0.5)):
        for i in range(n):
            lengths[(f"p{i}", model)] = 1000.0 + rng.normal(0, 200)
            won = rng.random() < expit(quality - hard[i])
            battles.append(Battle(prompt_id=f"p{i}", model_a=model, model_b="ref",
                                  outcome="model_a" if won else "model_b"))
    rows = {r.model: r for r in lc_win_rates(battles, lengths, "ref", bootstrap=0)}
    # each model's difficulty comes from the other two: a positive weight on it (easy prompts: more wins)
    assert all(r.difficulty_coef > 0.3 for r in rows.values())
    assert rows["a"].lc_win_rate > rows["b"].lc_win_rate > rows["c"].lc_win_rate
    assert rows["a"].lc_low is None  # no bootstrap, no interval


def test_ties_count_half_and_unknown_lengths_are_left_out():
    battles = [Battle(prompt_id=f"p{i}", model_a="m", model_b="ref", outcome="tie") for i in range(40)]
    battles.append(Battle(prompt_id="nolength", model_a="m", model_b="ref", outcome="model_a"))
    lengths = {(f"p{i}", k): float(100 + i) for i in range(40) for k in ("m", "ref")}
    battles.append(Battle(prompt_id="gone", model_a="ref", model_b="x", outcome="model_b"))  # x: no length at all
    with pytest.warns(UserWarning, match=r"2 battles against ref left out: an answer's length is unknown .* by "
                                         r"model: m 1, x 1"):
        (r,) = lc_win_rates(battles, lengths, "ref", bootstrap=20)
    assert r.battles == 40 and r.win_rate == 50.0 and r.lc_win_rate == pytest.approx(50.0, abs=1e-6)
    assert r.unknown_length == 1 and r.as_dict()["unknown_length"] == 1


def test_lc_win_rate_errors_name_the_problem():
    battles = [Battle(prompt_id="p", model_a="x", model_b="y", outcome="tie")]
    with pytest.raises(Exception, match="no battles against the reference 'ref'"):
        lc_win_rates(battles, {}, "ref")


def test_alpaca_eval_outputs_import_as_answers_that_meet_ingested_prompts(tmp_path):
    questions = tmp_path / "alpaca_eval.json"
    questions.write_text(json.dumps(QUESTIONS))
    prompts = ingest([questions]).prompts
    outputs = tmp_path / "model_outputs.json"
    outputs.write_text(json.dumps([{**q, "output": f"answer {k}", "generator": "my-model"}
                                   for k, q in enumerate(QUESTIONS)]))
    jsonl = tmp_path / "reference.jsonl"
    jsonl.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n"
                     + json.dumps({"instruction": "no generator", "output": "x"}) + "\n"
                     + json.dumps({"instruction": "bad", "output": ["not", "text"], "generator": "g"}) + "\n")
    report = read_answers([outputs, jsonl])
    assert [(a.prompt_id, a.model, a.turns) for a in report.answers] == [
        (prompts[0].id, "my-model", ["answer 0"]), (prompts[1].id, "my-model", ["answer 1"]),
        (prompts[0].id, "gpt4_turbo", ["Tom Hanks."]), (prompts[1].id, "gpt4_turbo", ["A cat sat."])]
    assert len(report.skipped) == 2
    assert "reference.jsonl:3" in report.skipped[0] and "no 'generator'" in report.skipped[0]
    assert "reference.jsonl:4" in report.skipped[1] and "'output' must be text" in report.skipped[1]
    assert read_answers([jsonl], model="renamed").answers[0].model == "renamed"
    # through the commands: the imported answers meet the ingested questions (no orphans reported)
    ws = tmp_path / "ws"
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(questions), "--out", str(ws)]).exit_code == 0
    result = runner.invoke(app, ["import-answers", str(outputs), "-w", str(ws)])
    assert result.exit_code == 0, result.output
    assert "imported 2 answers of my-model" in result.output and "no prompt" not in result.output
    with Store(ws, readonly=True) as store:
        assert {a.prompt_id for a in store.get_answers()} == {p.id for p in store.get_prompts("ingested")}


def make_alpaca_workspace(tmp_path):
    """A workspace as an AlpacaEval user makes one: questions ingested, outputs imported, battles judged."""
    rng = np.random.default_rng(11)
    n = 120
    prompts = [Prompt(id=f"q{i}", turns=[f"question {i}"], category="general") for i in range(n)]
    cfg = RunConfig.model_validate({
        "name": "ae", "prompts": {"set": "alpaca"}, "ratings": {"bootstrap": 20},
        "models": [{"name": m, "engine": "imported"} for m in ("gpt4_turbo", "verbose")],
    })
    ws = tmp_path / "ws"
    with Store(ws) as store:
        store.put_prompts("alpaca", prompts)
        pipeline.save_config(cfg, store)
        pipeline.stage_prompts(cfg, store)
        store.put_answers([Answer(prompt_id=p.id, model="gpt4_turbo", turns=["x" * 800]) for p in prompts])
        store.put_answers([Answer(prompt_id=p.id, model="verbose", turns=["y" * int(800 + rng.normal(300, 300))])
                           for p in prompts])
        ans = {(a.prompt_id, a.model): len(a.turns[0]) for a in store.get_answers()}
        battles = []
        for p in prompts:
            d = ans[(p.id, "verbose")] - ans[(p.id, "gpt4_turbo")]
            won = rng.random() < expit(2.0 * np.tanh(d / 300))
            battles.append(Battle(prompt_id=p.id, model_a="verbose", model_b="gpt4_turbo",
                                  outcome="model_a" if won else "model_b", judge="verifier"))
        store.replace_battles("verifier", battles)
    return ws


def test_lc_winrate_command_table_json_and_errors(tmp_path):
    ws = make_alpaca_workspace(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["lc-winrate", str(ws), "--reference", "gpt4_turbo", "--json", "-b", "50"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["model"] == "verbose" and row["reference"] == "gpt4_turbo" and row["battles"] == 120
    assert row["win_rate"] > 60 and row["lc_low"] <= 50 <= row["lc_high"]
    table = runner.invoke(app, ["lc-winrate", str(ws), "-r", "gpt4_turbo", "-b", "20"])
    assert table.exit_code == 0 and "LC win rate" in table.stdout and "verbose" in table.stdout
    bad = runner.invoke(app, ["lc-winrate", str(ws), "-r", "gpt-5"])
    assert bad.exit_code == 2 and "the reference 'gpt-5' played no battle here" in bad.output
    assert "gpt4_turbo, verbose" in bad.output
    unnamed = runner.invoke(app, ["lc-winrate", str(ws)])
    assert unnamed.exit_code == 2 and "--reference" in unnamed.output
    missing = runner.invoke(app, ["lc-winrate", str(tmp_path / "nowhere"), "-r", "x"])
    assert missing.exit_code == 2 and "not a workspace" in missing.output


def test_the_command_counts_the_battles_it_leaves_out_for_an_unknown_answer_length(tmp_path):
    ws = make_alpaca_workspace(tmp_path)
    with Store(ws) as store:
        battles = store.get_battles("verifier")
        extra = [Battle(prompt_id=f"unanswered{i}", model_a="verbose", model_b="gpt4_turbo", outcome="model_a",
                        judge="verifier") for i in range(3)]
        store.replace_battles("verifier", [*battles, *extra])
    runner = CliRunner()
    table = runner.invoke(app, ["lc-winrate", str(ws), "-r", "gpt4_turbo", "-b", "0"])
    assert table.exit_code == 0, table.output
    assert "battles left out, an answer's length unknown: verbose 3" in table.stdout
    assert "3 battles against gpt4_turbo left out" in table.output  # and warned, with the count
    (row,) = json.loads(runner.invoke(app, ["lc-winrate", str(ws), "-r", "gpt4_turbo", "-b", "0", "--json"]).stdout)
    assert row["battles"] == 120 and row["unknown_length"] == 3


def test_published_alpaca_eval_leaderboard_lc_and_raw_differ_most_for_long_outputs():
    """Sanity check on the real AlpacaEval 2 leaderboard: the published LC win rate sits below the raw
    one for the longest outputs and above it for the shortest, as a length-controlled figure should."""
    path = shared("alpaca_eval", "alpaca_eval_2_weighted_gpt4_turbo_leaderboard.csv")
    import pandas as pd

    frame = pd.read_csv(path, index_col=0).dropna(subset=["length_controlled_winrate", "avg_length"])
    gap = frame["length_controlled_winrate"] - frame["win_rate"]
    long, short = frame["avg_length"] > frame["avg_length"].quantile(0.8), frame["avg_length"] < frame[
        "avg_length"].quantile(0.2)
    assert gap[long].median() < 0 < gap[short].median()
    assert read_board(path).layout == "alpaca-eval"


def length_loving_judge(body):
    """A pairwise judge that prefers the longer answer 4 times in 5 (a coin seeded by the texts)."""
    import hashlib

    user = body["messages"][-1]["content"]
    a, b = fenced(user, "ANSWER A"), fenced(user, "ANSWER B")
    pair = "|".join(sorted((a, b)))  # the same coin in both orders
    coin = int(hashlib.sha256(pair.encode()).hexdigest(), 16) % 5
    longer_wins = coin != 0
    a_wins = (len(a) > len(b)) == longer_wins
    return json.dumps({"explanation": "ok", "score_a": 8 if a_wins else 4, "score_b": 4 if a_wins else 8})


def test_alpaca_eval_flow_through_the_commands_with_a_judge_on_localhost(tmp_path, scripted_server):
    """Questions ingested, two generators' outputs imported, battles judged over HTTP by a judge that
    likes length, then lc-winrate against the run's baseline: raw well above 50, LC back near 50."""
    rng = np.random.default_rng(2)
    n = 150
    questions = [{"instruction": f"Explain topic number {i}.", "output": "", "generator": "gpt4_turbo",
                  "dataset": "helpful_base"} for i in range(n)]
    (tmp_path / "alpaca_eval.json").write_text(json.dumps(questions))
    ref = [{**q, "output": f"Reference {i}. " + "r" * int(rng.integers(400, 800))} for i, q in enumerate(questions)]
    verbose = [{**q, "output": f"Verbose {i}. " + "v" * int(len(ref[i]["output"]) + rng.normal(250, 250)),
                "generator": "verbose"} for i, q in enumerate(questions)]
    (tmp_path / "ref.json").write_text(json.dumps(ref))
    (tmp_path / "verbose.jsonl").write_text("\n".join(json.dumps(r) for r in verbose) + "\n")
    judge = scripted_server(length_loving_judge, usage=(10, 10))
    config = tmp_path / "ae.yaml"
    config.write_text(
        "name: ae\nprompts: {set: ingested}\nratings: {bootstrap: 20}\n"
        "models:\n  - {name: gpt4_turbo, engine: imported}\n  - {name: verbose, engine: imported}\n"
        "battles: {schedule: baseline, baseline: gpt4_turbo}\n"
        f"judge: {{kind: llm, name: lj, template: pairwise, model: {{name: j, engine: openai, model: j, "
        f"base_url: '{judge.url}'}}}}\n")
    ws = tmp_path / "ws"
    runner = CliRunner()
    for args in (["ingest", str(tmp_path / "alpaca_eval.json"), "--out", str(ws)],
                 ["import-answers", str(tmp_path / "ref.json"), str(tmp_path / "verbose.jsonl"), "-w", str(ws)],
                 ["battle", str(config), "-w", str(ws)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    # both orders, and the canaries (at most 5% of the games: 4 pairs here, planted in both orders; the
    # identical pair's two orders are one prompt, asked once)
    assert judge.requests == 2 * n + 7
    result = runner.invoke(app, ["lc-winrate", str(ws), "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["reference"] == "gpt4_turbo" and row["battles"] == n
    assert row["win_rate"] > 62 and row["win_low"] > 50
    assert row["lc_low"] <= 50 <= row["lc_high"] and row["lc_win_rate"] < row["win_rate"] - 10
    page = write_report(ws).read_text()
    assert "Length-controlled win rate" in page and f"{row['lc_win_rate']:.1f}" in page
    assert f"{row['win_rate']:.1f}" in page
