"""Consistency metrics on hand-made boards, the board readers, and `arena compare`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer
from scipy.stats import norm
from typer.testing import CliRunner

from arena_learning.cli.rating import register
from arena_learning.errors import ArenaError
from arena_learning.rating.boards import Z95, read_board
from arena_learning.rating.consistency import compare_boards, loose_name, separability
from arena_learning.records import Rating

from .conftest import shared


def board(rows):
    return [Rating(model=m, rating=s, ci_low=lo, ci_high=hi) for m, s, lo, hi in rows]


# Reference: A > B > C ~ D; it separates A-B, A-C, A-D, B-C, B-D but not C-D.
REFERENCE = board([("A", 100, 95, 105), ("B", 80, 75, 85), ("C", 60, 55, 65), ("D", 58, 50, 70)])
# Candidate: A on top, but it puts C and D confidently above B; C and D overlap.
CANDIDATE = board([("A", 1200, 1180, 1220), ("B", 1095, 1085, 1105), ("C", 1120, 1112, 1128), ("D", 1160, 1125, 1170)])


def test_hand_made_boards_give_hand_computed_metrics():
    c = compare_boards(CANDIDATE, REFERENCE)
    assert c.models == ["A", "B", "C", "D"]
    # ranks ref (4,3,2,1), candidate (4,1,2,3): sum d^2 = 8, rho = 1 - 6*8/(4*15)
    assert c.spearman == pytest.approx(0.2)
    # concordant A-B, A-C, A-D; discordant B-C, B-D, C-D
    assert c.kendall == pytest.approx(0.0)
    # over the 5 pairs the reference separates: A-B +1, A-C +1, A-D +1, B-C -1, B-D -1
    assert c.agreement == pytest.approx(0.2)
    assert c.agreement_pairs == 5
    # candidate: every pair separated but C-D (1125 < 1128)
    assert c.separability == pytest.approx(5 / 6)
    assert c.separability_reference == pytest.approx(5 / 6)
    assert c.average == pytest.approx((0.2 + 0.2 + 5 / 6) / 3)
    se = {r.model: (r.ci_high - r.ci_low) / (2 * Z95) for r in CANDIDATE}
    s = {r.model: r.rating for r in CANDIDATE}

    def p_above(i, j):
        return norm.cdf((s[i] - s[j]) / math.hypot(se[i], se[j]))

    errors = [(p_above(i, j) - 1) ** 2 for i, j in [("A", "B"), ("A", "C"), ("A", "D"), ("B", "C"), ("B", "D")]]
    assert c.brier == pytest.approx(sum(errors) / 5, abs=1e-12)
    assert 0.39 < c.brier < 0.41


def test_identical_boards_agree_perfectly():
    c = compare_boards(REFERENCE, REFERENCE)
    assert (c.spearman, c.kendall, c.agreement) == (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0))
    assert c.brier < 1e-3


def test_a_pair_the_candidate_cannot_separate_for_lack_of_an_interval_counts_as_not_agreeing():
    # The reference separates all three pairs. The candidate agrees on a-b but has no
    # interval for c: a-c and b-c are not separated by it, so they score 0, not vanish.
    ref = board([("a", 300, 290, 310), ("b", 200, 190, 210), ("c", 100, 90, 110)])
    cand = board([("a", 30, 29, 31), ("b", 20, 19, 21), ("c", 10, None, None)])
    c = compare_boards(cand, ref)
    assert c.agreement_pairs == 3
    assert c.agreement == pytest.approx(1 / 3)
    # a candidate with no intervals at all agrees on nothing
    bare = board([("a", 30, None, None), ("b", 20, None, None), ("c", 10, None, None)])
    c = compare_boards(bare, ref)
    assert (c.agreement, c.agreement_pairs) == (pytest.approx(0.0), 3)


def test_boards_without_intervals_use_orders_only():
    cand = board([("a", 3, None, None), ("b", 2, None, None), ("c", 1, None, None)])
    ref = board([("a", 30, None, None), ("b", 10, None, None), ("c", 20, None, None)])
    c = compare_boards(cand, ref)
    assert c.spearman == pytest.approx(0.5)
    assert c.agreement is None and c.separability is None and c.average is None
    # pairs ordered by the reference: a>b (cand right), a>c (right), c>b (cand wrong)
    assert c.brier == pytest.approx(1 / 3)


def test_models_are_matched_loosely_and_the_rest_reported():
    cand = board([("GPT_4", 3, 2, 4), ("llama", 2, 1, 3), ("Mine", 1, 0, 2)])
    ref = board([("gpt-4", 9, 8, 10), ("Llama", 5, 4, 6), ("theirs", 1, 0, 2)])
    c = compare_boards(cand, ref)
    assert c.models == ["GPT_4", "llama"] and c.only_in_candidate == ["Mine"] and c.only_in_reference == ["theirs"]
    assert compare_boards(cand, ref, match="exact").models == []
    assert loose_name(" Foo_Bar ") == "foo-bar"
    # Two names of one board that match as one are never guessed: both stay unmatched.
    c = compare_boards(board([("gpt_4", 1, 0, 2), ("GPT-4", 2, 1, 3), ("llama", 3, 2, 4)]), ref)
    assert c.models == ["llama"] and c.only_in_candidate == ["GPT-4", "gpt_4"]


def test_separability_counts_touching_intervals_as_overlapping():
    import numpy as np

    assert separability(np.array([0.0, 1.0, 3.0]), np.array([1.0, 2.0, 4.0])) == pytest.approx(2 / 3)


def test_csv_with_mapped_columns_and_json_boards(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("name,elo,lo,hi\nx,1100,1090,1110\ny,1000,990,1010\n")
    b = read_board(p, model_col="name", score_col="elo", lower_col="lo", upper_col="hi")
    assert [(r.model, r.rating, r.ci_low, r.ci_high) for r in b.entries] == [("x", 1100, 1090, 1110),
                                                                             ("y", 1000, 990, 1010)]
    with pytest.raises(ArenaError, match=r"no column 'model' \(columns: name, elo, lo, hi\)"):
        read_board(p)
    j = tmp_path / "board.json"
    j.write_text(json.dumps([{"model": "x", "rating": 2.0, "ci_low": 1.0, "ci_high": 3.0}]))
    assert read_board(j).layout == "arena-learning"
    bad = tmp_path / "bad.csv"
    bad.write_text("model,score\nx,high\n")
    with pytest.raises(ArenaError, match=r"bad.csv:2: column 'score' holds 'high'"):
        read_board(bad)


def test_directory_is_read_through_the_workspace_hook(tmp_path, monkeypatch):
    import arena_learning

    seen = []

    def fake_board(path):
        seen.append(Path(path))
        return board([("x", 1100, 1090, 1110), ("y", 1000, 990, 1010), ("z", 900, 890, 910)])

    monkeypatch.setattr(arena_learning, "workspace_board", fake_board, raising=False)
    b = read_board(tmp_path)
    assert b.layout == "workspace" and seen == [tmp_path] and len(b.entries) == 3


def shared_boards():
    """The published Arena-Hard and AlpacaEval 2 leaderboards in ../shared/data (the test is skipped without them)."""
    return (shared("arena-hard-v0.1", "leaderboard_20240731.csv"),
            shared("alpaca_eval", "alpaca_eval_2_weighted_gpt4_turbo_leaderboard.csv"))


def test_reads_the_arena_hard_and_alpaca_eval_boards():
    arena_hard, alpaca = shared_boards()
    ah = read_board(arena_hard)
    assert ah.layout == "arena-hard"
    first = ah.entries[0]
    assert (first.model, first.rating, first.ci_low, first.ci_high) == ("gpt-4-turbo-2024-04-09", 82.63, 80.75, 84.6)
    ae = read_board(alpaca)
    assert ae.layout == "alpaca-eval"
    null = ae.entries[0]
    assert null.model == "NullModel"
    assert null.ci_low == pytest.approx(86.45780691307947 - Z95 * 0.14180005113427935)
    assert any(r.ci_low is None for r in ae.entries)  # rows without a standard error have no interval


def cli():
    app = typer.Typer()
    register(app)
    return app


def test_compare_command_prints_spearman_over_the_overlapping_models():
    arena_hard, alpaca = shared_boards()
    result = CliRunner().invoke(cli(), ["compare", str(arena_hard), str(alpaca)])
    assert result.exit_code == 0, result.output
    # 16 exact names, and 11 spelled otherwise (gpt-4-0314 / gpt4_0314, llama-2-70b-chat / llama-2-70b-chat-hf, ...)
    # the table's title wraps at the table's width (PIPE_WIDTH when not a terminal): compare words, not lines
    assert "Spearman" in result.stdout and "27 models on both" in " ".join(result.stdout.split())
    data = json.loads(CliRunner().invoke(cli(), ["compare", str(arena_hard), str(alpaca), "--json"]).stdout)
    assert data["n_models"] == 27 and data["layout_a"] == "arena-hard" and data["layout_b"] == "alpaca-eval"
    how = {c: (r, h) for c, r, h in data["matches"]}
    assert how["gpt-4-0314"] == ("gpt4_0314", "loose") and how["vicuna-33b"] == ("vicuna-33b-v1.3", "version dropped")
    assert how["mixtral-8x7b-instruct-v0.1"] == ("Mixtral-8x7B-Instruct-v0.1", "loose")
    assert 0.8 < data["spearman"] <= 1.0
    assert data["separability"] is not None and data["average"] is not None
    exact = json.loads(CliRunner().invoke(cli(), ["compare", str(arena_hard), str(alpaca), "--json", "--match",
                                                  "exact"]).stdout)
    assert exact["n_models"] == 16


def test_compare_command_reports_user_errors_with_exit_code_2(tmp_path):
    missing = CliRunner().invoke(cli(), ["compare", str(tmp_path / "nope.csv"), str(tmp_path / "nope2.csv")])
    assert missing.exit_code == 2 and "leaderboard not found" in missing.stderr
    a = tmp_path / "a.csv"
    a.write_text("model,score\nx,1\ny,2\n")
    b = tmp_path / "b.csv"
    b.write_text("model,score\nq,1\nr,2\n")
    disjoint = CliRunner().invoke(cli(), ["compare", str(a), str(b)])
    assert disjoint.exit_code == 2 and "0 model(s) are on both boards" in disjoint.stderr


def test_compare_column_options_name_the_reference_columns_only(tmp_path):
    ours = tmp_path / "ours.csv"
    ours.write_text("model,rating,ci_low,ci_high\nx,1100,1090,1110\ny,1000,990,1010\nz,900,890,910\n")
    ref = tmp_path / "ref.csv"
    ref.write_text("name,elo\nx,50\ny,40\nz,30\n")
    result = CliRunner().invoke(cli(), ["compare", str(ours), str(ref), "--model-col", "name", "--score-col", "elo",
                                        "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["layout_a"] == "arena-learning" and data["layout_b"] == "columns"
    assert data["n_models"] == 3 and data["spearman"] == pytest.approx(1.0)
    help_text = CliRunner().invoke(cli(), ["compare", "--help"], terminal_width=200).stdout
    assert "--board-model-col" in help_text and "reference" in help_text


def test_board_errors_name_the_jsonl_line_and_the_json_record(tmp_path):
    rows = [{"model": "x", "score": 2.0}, {"model": "y", "score": "high"}]
    jsonl = tmp_path / "board.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ArenaError, match=rf"{jsonl}:2: column 'score' holds 'high'"):
        read_board(jsonl)
    js = tmp_path / "board.json"
    js.write_text(json.dumps(rows))
    with pytest.raises(ArenaError, match=rf"{js}: record 2: column 'score' holds 'high'"):
        read_board(js)
