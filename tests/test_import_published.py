"""Published judgments as users bring them (issue 21): FastChat single grades and arena-hard files written
here in the peers' own layouts, imported, scored and exported with no hand edits."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from arena_learning.arena.peers import read_judgments, write_fastchat_single
from arena_learning.cli import app
from arena_learning.readers import ReadError, iter_rows
from arena_learning.store import Store

runner = CliRunner()
WIDE = {"COLUMNS": "300"}  # tables hold long tmp paths: no truncation


def cli(*args, code=0):
    result = runner.invoke(app, [str(a) for a in args], env=WIDE)
    assert result.exit_code == code, f"arena {args} exited {result.exit_code}:\n{result.output}"
    return result.output


def single_rows(grades, judge=("gpt-4", "single-v1"), turn_type=int):
    """FastChat ``model_judgment/gpt-4_single.jsonl`` rows, as gen_judgment.py writes them."""
    return [{"question_id": q, "model": m, "judge": list(judge) if judge else None,
             "user_prompt": f"[Question]\n{q}", "judgment": f"Rating: [[{s}]]", "score": s, "turn": turn_type(t),
             "tstamp": 1700000000.5} for (q, t), by in grades.items() for m, s in by.items()]


def write_jsonl(path, rows, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


GRADES = {(81, 1): {"vicuna-13b": 8, "llama-13b": 3, "alpaca-13b": 5},
          (81, 2): {"vicuna-13b": 6, "llama-13b": -1, "alpaca-13b": 4},
          (82, 1): {"vicuna-13b": 9, "llama-13b": None, "alpaca-13b": 6}}


def test_missing_judge_names_the_option_and_keeps_the_brackets(tmp_path):
    path = write_jsonl(tmp_path / "gpt-4_single.jsonl", single_rows(GRADES, judge=None))
    out = cli("import-judgments", path, "-w", tmp_path / "ws", code=2)
    # The message names --judge, and the record's own text [model, prompt] is not eaten as Rich markup.
    assert "--judge NAME" in out and "[model, prompt]" in out and "nothing was imported" in out
    out = cli("import-judgments", path, "-w", tmp_path / "ws", "--judge", "gpt-4 [mine]")
    assert "judge gpt-4 [mine]: " in out
    # With the files' judge field, no --judge is needed: its name is used.
    path2 = write_jsonl(tmp_path / "b.jsonl", single_rows(GRADES))
    cli("import-judgments", path2, "-w", tmp_path / "ws2")
    with Store(tmp_path / "ws2", readonly=True) as store:
        assert store.judgment_judges() == ["gpt-4"]


def test_integral_float_turns_are_turns(tmp_path):
    path = write_jsonl(tmp_path / "gpt-4_single.jsonl", single_rows(GRADES, turn_type=float))  # pandas writes 1.0
    got = read_judgments([path])
    assert not got.skipped and {j.prompt_id for j in got.judgments} == {"81", "81#turn2", "82"}
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**single_rows(GRADES)[0], "turn": 1.5}])
    assert "turn 1.5 is not a turn number" in read_judgments([bad]).skipped[0]


def test_skips_are_counted_by_reason_and_strict_refuses(tmp_path):
    rows = single_rows(GRADES)
    bad = [{**rows[0], "turn": "two"}] * 3 + [{**rows[1], "score": "high"}] + [{"hello": 1}] * 2
    path = tmp_path / "gpt-4_single.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + bad) + "{not json\n", encoding="utf-8")
    got = read_judgments([path])
    n = len(rows)
    assert got.skip_table() == [
        ("turn is not a turn number (1, 2, ...)", 3, f"{path}:{n + 1}"),
        ("not a judgment record (expected arena-hard ..., FastChat ..., or FastChat single ... and ...)", 2,
         f"{path}:{n + 5}"),
        ("score is not a number", 1, f"{path}:{n + 4}"),
        ("bad json", 1, f"{path}:{n + 7}")]
    out = cli("import-judgments", path, "-w", tmp_path / "ws")
    assert "records skipped" in out and "7 records skipped" in out
    line = next(ln for ln in out.splitlines() if "turn is not a turn number" in ln)
    assert " 3 " in line and f"{path}:{n + 1}" in line
    out = cli("import-judgments", path, "-w", tmp_path / "strict", "--strict", code=2)
    assert "--strict: 7 records cannot be imported" in out and "score is not a number" in out
    assert not (tmp_path / "strict" / "arena.db").exists()  # nothing written


def test_failed_grades_are_kept_and_scores_counts_them(tmp_path):
    path = write_jsonl(tmp_path / "gpt-4_single.jsonl", single_rows(GRADES))
    out = cli("import-judgments", path, "-w", tmp_path / "ws")
    assert "2 grades marked failed" in out
    # One judge in the workspace: `arena scores` needs no --judge.
    got = json.loads(cli("scores", tmp_path / "ws", "--json", "-b", "0"))
    by = {r["model"]: r for r in got["models"]}
    assert got["judge"] == "gpt-4"
    # llama-13b: graded on 81 turn 1 only; its 81 turn 2 (-1) and 82 (null) gradings failed.
    assert (by["llama-13b"]["mean"], by["llama-13b"]["graded"], by["llama-13b"]["failed"]) == (3.0, 1, 2)
    assert by["llama-13b"]["turns"] == {"1": {"mean": 3.0, "n": 1}}
    # The other models keep every grade, also those beside a failed one (FastChat's means).
    assert by["vicuna-13b"]["mean"] == pytest.approx((8 + 6 + 9) / 3) and by["vicuna-13b"]["failed"] == 0
    assert by["alpaca-13b"]["mean"] == pytest.approx((5 + 4 + 6) / 3)
    table = cli("scores", tmp_path / "ws", "-b", "0")
    assert "failed" in table and "no grade" in table
    # Exported again, the failed gradings are FastChat's -1; re-imported, the same games.
    with Store(tmp_path / "ws", readonly=True) as store:
        judgments, grades = store.get_judgments("gpt-4"), store.get_grades("gpt-4")
    assert len(grades) == 9 and sum(g.score is None for g in grades) == 2
    report = write_fastchat_single(judgments, tmp_path / "out.jsonl", grades=grades)
    out_rows = [json.loads(x) for x in report.files[0].read_text().splitlines()]
    assert sorted((r["question_id"], r["model"], r["turn"], r["score"]) for r in out_rows) == sorted(
        (q, m, t, -1 if s is None else s) for (q, t), by in GRADES.items() for m, s in by.items())
    again = read_judgments(report.files)
    key = sorted((j.prompt_id, j.model_a, j.model_b, j.status, j.scores_a, j.scores_b) for j in judgments)
    assert sorted((j.prompt_id, j.model_a, j.model_b, j.status, j.scores_a, j.scores_b)
                  for j in again.judgments) == key


def test_gzipped_judgments_read_as_plain_with_line_numbers(tmp_path):
    rows = single_rows(GRADES)
    plain = read_judgments([write_jsonl(tmp_path / "a.jsonl", rows)])
    packed = read_judgments([write_jsonl(tmp_path / "a.jsonl.gz", rows, gz=True)])
    assert [j.model_dump() for j in packed.judgments] == [j.model_dump() for j in plain.judgments]
    broken = tmp_path / "b.jsonl.gz"
    broken.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in rows[:2]) + b"{oops\n"))
    assert read_judgments([broken]).skipped[0].startswith(f"{broken}:3: invalid JSON")
    cli("import-judgments", tmp_path / "a.jsonl.gz", "-w", tmp_path / "ws")
    with Store(tmp_path / "ws", readonly=True) as store:
        assert len(store.get_judgments("gpt-4")) == len(plain.judgments)


def test_gzipped_json_and_csv_records(tmp_path):
    records = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    (tmp_path / "r.json.gz").write_bytes(gzip.compress(json.dumps(records, indent=1).encode()))
    assert [(r.where, r.data) for r in iter_rows(tmp_path / "r.json.gz")] == [
        (f"{tmp_path / 'r.json.gz'}:2", records[0]), (f"{tmp_path / 'r.json.gz'}:6", records[1])]
    (tmp_path / "r.csv.gz").write_bytes(gzip.compress(b"a,b\n1,x\n2,y\n"))
    assert [(r.where, r.data) for r in iter_rows(tmp_path / "r.csv.gz")] == [
        (f"{tmp_path / 'r.csv.gz'}:2", {"a": "1", "b": "x"}), (f"{tmp_path / 'r.csv.gz'}:3", {"a": "2", "b": "y"})]
    (tmp_path / "fake.jsonl.gz").write_bytes(b'{"a": 1}\n')
    with pytest.raises(ReadError, match="not a readable gzip file"):
        list(iter_rows(tmp_path / "fake.jsonl.gz"))
    (tmp_path / "r.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(ReadError, match="zstd -d"):
        list(iter_rows(tmp_path / "r.jsonl.zst"))


def test_each_grade_is_stored_once_and_the_pairs_are_derived(tmp_path):
    import sqlite3

    from arena_learning.arena.battles import combine_games
    from arena_learning.store import SCHEMA_VERSION

    path = write_jsonl(tmp_path / "gpt-4_single.jsonl", single_rows(GRADES))
    ws = tmp_path / "ws"
    cli("import-judgments", path, "-w", ws)
    db = sqlite3.connect(ws / "arena.db")
    counts = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("grades", "judgments", "battles")}
    db.close()
    assert counts == {"grades": 9, "judgments": 0, "battles": 0}  # the 9 pair games and 5 battles are not stored
    with Store(ws, readonly=True) as store:
        games, battles = store.get_judgments("gpt-4"), store.get_battles("gpt-4")
        assert store.info()["judges"] == {"gpt-4": 5} and "llama-13b" in store.model_names()
    # The derived battles are those the games make by the peer's rule (FastChat single: one game, one battle).
    assert [b.model_dump() for b in battles] == [b.model_dump() for b in combine_games(games, 0.0, mode="mean")]
    assert len(games) == 9 and sum(g.status == "failed" for g in games) == 4
    # Exported, every grade comes back with its own text.
    out = tmp_path / "out.jsonl"
    cli("export-judgments", ws, "--format", "fastchat-single", "--out", out)
    assert sorted((r["question_id"], r["model"], r["turn"], r["judgment"]) for r in map(json.loads, out.open())) == \
        sorted((r["question_id"], r["model"], r["turn"], r["judgment"]) for r in single_rows(GRADES))
    # A second file adds grades (and replaces those of the same answer).
    more = write_jsonl(tmp_path / "more.jsonl", single_rows({(83, 1): {"vicuna-13b": 7, "llama-13b": 2},
                                                            (81, 1): {"llama-13b": 4}}))
    assert "6 battles in all" in cli("import-judgments", more, "-w", ws)
    with Store(ws) as store:
        grades = {(g.prompt_id, g.model): g.score for g in store.get_grades("gpt-4")}
        assert len(grades) == 11 and grades[("81", "llama-13b")] == 4
        assert store.forget_model("llama-13b")["grades"] == 4
        assert all("llama-13b" not in (b.model_a, b.model_b) for b in store.get_battles("gpt-4"))
    # A workspace of the previous schema (no grades table) reads as it is, and is brought up when written.
    db = sqlite3.connect(ws / "arena.db")
    db.execute("DROP TABLE grades")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    with Store(ws, readonly=True) as store:
        assert store.get_grades() == [] and store.get_battles("gpt-4") == [] and store.judgment_judges() == []
    with Store(ws) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        assert store.get_grades() == []


def test_model_names_with_brackets_are_printed_as_they_are(tmp_path):
    rows = single_rows({(81, 1): {"[bold]x[/bold]": 8, "y [v2]": 6}})
    ws = tmp_path / "ws"
    cli("import-judgments", write_jsonl(tmp_path / "a.jsonl", rows), "-w", ws)
    table = cli("scores", ws, "-b", "0")
    assert "[bold]x[/bold]" in table and "y [v2]" in table
    bad = tmp_path / "[weird].jsonl"
    bad.write_text('{"question_id": 1, "model": "[m]", "score": 5, "judge": null}\n', encoding="utf-8")
    out = cli("import-judgments", bad, "-w", tmp_path / "ws2", code=2)
    assert "[weird].jsonl:1" in out and "[model, prompt]" in out


def test_gzipped_battle_logs_and_boards_read_as_plain(tmp_path):
    from arena_learning.errors import ArenaError
    from arena_learning.rating.battlelog import read_battle_log
    from arena_learning.rating.boards import read_board

    rows = [{"model_a": "x", "model_b": "y", "winner": w, "question_id": str(i)}
            for i, w in enumerate(["model_a", "model_b", "tie", "model_a"])]
    plain = write_jsonl(tmp_path / "log.jsonl", rows)
    packed = write_jsonl(tmp_path / "log.jsonl.gz", rows, gz=True)
    (a, ra), (b, rb) = read_battle_log(plain), read_battle_log(packed)
    assert (ra.rated, rb.rated) == (4, 4) and a.models == b.models
    broken = tmp_path / "bad.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"model_a": "x", "model_b": "y", "winner": "tie"}\n{oops\n'))
    with pytest.raises(ArenaError, match=r"bad\.jsonl\.gz:2"):
        read_battle_log(broken)
    board = tmp_path / "board.csv.gz"
    board.write_bytes(gzip.compress(b"model,score\nx,2\ny,1\n"))
    assert [(r.model, r.rating) for r in read_board(board).entries] == [("x", 2.0), ("y", 1.0)]
