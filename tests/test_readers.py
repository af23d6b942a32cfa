"""One reader for record files: ingest, imported answers and human labels report bad lines the same way."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from arena_learning.arena.imports import read_answers
from arena_learning.errors import ArenaError
from arena_learning.readers import ReadError, iter_rows


def test_rows_carry_their_line_and_bad_rows_their_reason(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"x": 1}\n\n{broken\n"\xff\xfe"\n{"x": 2}\n')
    rows = list(iter_rows(path))
    assert [(r.where.rsplit(":", 1)[1], r.kind) for r in rows] == [("1", None), ("3", "bad_json"), ("4", "not_utf8"),
                                                                   ("5", None)]
    assert rows[2].reason.startswith("not valid UTF-8 (byte 0xff")


def test_records_of_a_json_array_have_the_line_they_start_on(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[\n  {"x": 1},\n\n  {"x": 2,\n   "y": 3}\n]\n', encoding="utf-8")
    assert [(r.where.rsplit(":", 1)[1], r.data) for r in iter_rows(path)] == [("2", {"x": 1}), ("4", {"x": 2, "y": 3})]


def test_a_file_of_unknown_type_is_an_error(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"\x00\x01binary")
    with pytest.raises(ReadError, match="unknown file type"):
        list(iter_rows(path))
    assert issubclass(ReadError, ArenaError)


def test_imported_answers_skip_bad_lines_with_file_and_line(tmp_path):
    path = tmp_path / "answers.jsonl"
    good = {"prompt_id": "p1", "model": "m", "turns": ["hello"]}
    path.write_bytes(json.dumps(good).encode() + b"\n{oops\n"
                     + b'{"prompt_id": "p2", "model": "m", "turns": ["\xff"]}\n'
                     + json.dumps({"prompt_id": "p3", "model": "m"}).encode() + b"\n")
    report = read_answers([path])
    assert [(a.prompt_id, a.turns) for a in report.answers] == [("p1", ["hello"])]
    assert [s.split(": ", 1)[0] for s in report.skipped] == [f"{path}:2", f"{path}:3", f"{path}:4"]
    assert "invalid JSON" in report.skipped[0] and "UTF-8" in report.skipped[1]


def test_imported_answers_from_parquet(tmp_path):
    path = tmp_path / "answers.parquet"
    pd.DataFrame({"prompt_id": ["p1", "p2"], "model": ["m", "m"], "turns": [["a"], ["b", "c"]]}).to_parquet(path)
    report = read_answers([path])
    assert [(a.prompt_id, a.turns) for a in report.answers] == [("p1", ["a"]), ("p2", ["b", "c"])]
    assert report.skipped == []
