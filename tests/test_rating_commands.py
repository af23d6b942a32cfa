"""`arena ratings` on battle logs in the Chatbot Arena format, and the leaderboard exports."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from arena_learning.cli.rating import register
from arena_learning.errors import ArenaError
from arena_learning.rating.battlelog import read_battle_log
from arena_learning.rating.boards import read_board
from arena_learning.rating.bt import leaderboard
from arena_learning.rating.export import LEADERBOARD_FIELDS, ratings_to_json, write_leaderboard_csv
from arena_learning.records import Battle

FIELDS = ["model", "rating", "ci_low", "ci_high", "rank", "rank_ci", "wins", "losses", "ties", "battles"]


def cli():
    app = typer.Typer()
    register(app)
    return app


def battle_rows(n=600, seed=0):
    """Chatbot-Arena-style rows among three models, plus rows that must not be rated."""
    rng = np.random.default_rng(seed)
    strength = {"strong": 1.0, "medium": 0.0, "weak": -1.0}
    models = list(strength)
    rows = []
    for i in range(n):
        a, b = rng.choice(models, 2, replace=False)
        p = 1 / (1 + np.exp(strength[b] - strength[a]))
        u = rng.random()
        winner = "model_a" if u < p - 0.05 else ("tie" if u < p + 0.05 else "model_b")
        if i % 50 == 0:
            winner = "tie (bothbad)"
        rows.append({"question_id": f"q{i // 2}", "model_a": a, "model_b": b, "winner": winner, "anony": True})
    rows += [
        {"question_id": "x1", "model_a": "strong", "model_b": "weak", "winner": "model_c", "anony": True},
        {"question_id": "x2", "model_a": "strong", "model_b": "weak", "winner": None, "anony": True},
        {"question_id": "x3", "model_a": "strong", "model_b": "weak", "winner": "model_c", "anony": True},
        {"question_id": "x4", "model_a": "strong", "model_b": None, "winner": "model_a", "anony": True},
    ]
    return rows


@pytest.fixture(params=["json", "jsonl", "parquet"])
def log_path(request, tmp_path):
    rows = battle_rows()
    path = tmp_path / f"battles.{request.param}"
    if request.param == "json":
        path.write_text(json.dumps(rows))
    elif request.param == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows))
    else:
        pd.DataFrame(rows).to_parquet(path)
    return path


def test_battle_log_reader_counts_every_row_it_cannot_rate(log_path):
    table, report = read_battle_log(log_path)
    assert report.rows == 604 and report.rated == 600 and table.n_battles == 600
    assert report.skipped == {"unknown winner 'model_c'": 2, "unknown winner '<missing>'": 1,
                              "model_a or model_b missing": 1}
    assert report.prompt_column == "question_id" and table.n_prompts == 300
    assert (table.outcome == 2).sum() >= 12  # "tie (bothbad)" rows are ties
    assert any("skipped 2 row(s): unknown winner 'model_c'" in line for line in report.lines())


def test_ratings_command_prints_leaderboard_json(log_path):
    result = CliRunner().invoke(cli(), ["ratings", str(log_path), "--bootstrap", "50", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [list(r) for r in rows] == [FIELDS] * 3
    assert [r["model"] for r in rows] == ["strong", "medium", "weak"]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert all(r["ci_low"] < r["rating"] < r["ci_high"] for r in rows)
    assert sum(r["battles"] for r in rows) == 1200
    assert sum(r["wins"] + r["losses"] + r["ties"] for r in rows) == 1200
    assert "unknown winner 'model_c'" in result.stderr


def test_ratings_command_anchor_matches_the_library(tmp_path):
    rows = battle_rows(seed=3)
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    result = CliRunner().invoke(cli(), ["ratings", str(path), "-b", "30", "--anchor", "medium",
                                        "--anchor-rating", "1114", "--json", "--seed", "4"])
    got = {r["model"]: r for r in json.loads(result.stdout)}
    assert got["medium"]["rating"] == pytest.approx(1114.0)
    ok = [r for r in rows if r["winner"] in ("model_a", "model_b", "tie", "tie (bothbad)") and r["model_b"]]
    battles = [
        Battle(prompt_id=r["question_id"], model_a=r["model_a"], model_b=r["model_b"],
               outcome="tie" if r["winner"].startswith("tie") else r["winner"])
        for r in ok
    ]
    expected = {r.model: r for r in leaderboard(battles, anchor="medium", anchor_rating=1114, bootstrap=30, seed=4)}
    for m, r in got.items():
        assert r["rating"] == pytest.approx(expected[m].rating, abs=1e-9)
        assert r["ci_low"] == pytest.approx(expected[m].ci_low, abs=1e-9)


def test_ratings_table_csv_export_and_compare_round_trip(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(battle_rows()))
    out_csv = tmp_path / "out" / "board.csv"
    result = CliRunner().invoke(cli(), ["ratings", str(path), "-b", "20", "--csv", str(out_csv), "--elo-k", "16"])
    assert result.exit_code == 0, result.output
    assert "strong" in result.stdout and "online Elo" in result.stdout
    with out_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == FIELDS and rows[0]["model"] == "strong"
    back = read_board(out_csv)
    assert back.layout == "arena-learning" and back.entries[0].ci_low == pytest.approx(float(rows[0]["ci_low"]))
    same = CliRunner().invoke(cli(), ["compare", str(out_csv), str(out_csv), "--json"])
    assert json.loads(same.stdout)["spearman"] == pytest.approx(1.0)


def test_ratings_command_user_errors_exit_2(tmp_path):
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"model_a": "x", "model_b": "y", "outcome": "model_a"}))
    result = CliRunner().invoke(cli(), ["ratings", str(bad)])
    assert result.exit_code == 2 and "lacks column(s) winner" in result.stderr
    result = CliRunner().invoke(cli(), ["ratings", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and "battle log not found" in result.stderr
    ok = tmp_path / "c.jsonl"
    ok.write_text(json.dumps({"model_a": "x", "model_b": "y", "winner": "model_a"}))
    result = CliRunner().invoke(cli(), ["ratings", str(ok), "--ties", "coin"])
    assert result.exit_code == 2 and "unknown ties option 'coin'" in result.stderr
    only_bad = tmp_path / "d.jsonl"
    only_bad.write_text(json.dumps({"model_a": "x", "model_b": "y", "winner": "?"}))
    with pytest.raises(ArenaError, match="none of its 1 rows can be rated"):
        read_battle_log(only_bad)


def test_exports_keep_the_field_order_and_nulls(tmp_path):
    battles = [Battle(prompt_id=f"p{i}", model_a="a", model_b="b", outcome="model_a" if i % 3 else "model_b")
               for i in range(9)]
    board = leaderboard(battles, bootstrap=0)
    rows = ratings_to_json(board)
    assert tuple(rows[0]) == LEADERBOARD_FIELDS == tuple(FIELDS)
    assert rows[0]["ci_low"] is None and rows[0]["rank_ci"] is None
    assert json.loads(json.dumps(rows)) == rows
    path = write_leaderboard_csv(board, tmp_path / "x.csv")
    text = path.read_text().splitlines()
    assert text[0] == ",".join(FIELDS)
    assert text[1].startswith("a,") and ",,," in text[1]


def _no_nan(token):
    raise ValueError(f"{token} is not JSON")


def test_json_output_has_null_not_nan_for_a_model_in_no_bootstrap_round(tmp_path):
    rows = [{"question_id": f"q{i}", "model_a": "a", "model_b": "b", "winner": "model_a" if i % 3 else "model_b"}
            for i in range(30)]
    rows += [{"question_id": "r", "model_a": "rare", "model_b": "a", "winner": "model_a"},
             {"question_id": "r", "model_a": "a", "model_b": "rare", "winner": "model_a"}]
    path = tmp_path / "rare.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    # Seed 21 draws the prompt "r" in none of the 3 rounds.
    result = CliRunner().invoke(cli(), ["ratings", str(path), "-b", "3", "--seed", "21", "--json"])
    assert result.exit_code == 0, result.output
    got = {r["model"]: r for r in json.loads(result.stdout, parse_constant=_no_nan)}
    assert got["rare"]["ci_low"] is None and got["rare"]["ci_high"] is None
    assert got["a"]["ci_low"] is not None
    assert "rare: no battle in any of the 3 bootstrap rounds" in result.stderr


def test_parquet_log_with_categorical_columns_and_a_missing_value_is_read(tmp_path):
    frame = pd.DataFrame(battle_rows())
    for col in ("model_a", "model_b", "winner"):
        frame[col] = frame[col].astype("category")
    path = tmp_path / "battles.parquet"
    frame.to_parquet(path)
    assert isinstance(pd.read_parquet(path)["winner"].dtype, pd.CategoricalDtype)
    table, report = read_battle_log(path)
    assert report.rows == 604 and report.rated == 600 and table.n_battles == 600
    assert report.skipped == {"unknown winner 'model_c'": 2, "unknown winner '<missing>'": 1,
                              "model_a or model_b missing": 1}


def test_a_malformed_jsonl_battle_log_names_the_bad_line(tmp_path):
    lines = [json.dumps(r) for r in battle_rows()[:5]]
    lines.insert(3, '{"model_a": "x", "model_b": ')
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ArenaError, match=f"cannot read battle log {path}:4: "):
        read_battle_log(path)
