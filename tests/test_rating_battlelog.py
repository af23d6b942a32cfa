"""The battle-log reader on its own: Parquet read from buffers, equal to the pandas reading."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arena_learning.errors import ArenaError
from arena_learning.rating import battlelog
from arena_learning.rating.battlelog import read_battle_log

NAMES = ["alpha", " alpha", "beta ", "gamma", "", None, "delta  "]
WINNERS = ["model_a", "model_b", "tie", "tie (bothbad)", "model_c", None]


def messy_rows(rng, n, id_kind="str"):
    rows = []
    for _ in range(n):
        if rng.random() < 0.1:
            q = None
        elif id_kind == "str":
            q = f"question-{int(rng.integers(0, n // 3 + 1)):x}" + "é" * int(rng.integers(0, 3))
        else:
            q = int(rng.integers(0, n // 3 + 1))
        rows.append({"question_id": q, "model_a": NAMES[rng.integers(0, len(NAMES))],
                     "model_b": NAMES[rng.integers(0, len(NAMES))], "winner": WINNERS[rng.integers(0, len(WINNERS))]})
    return rows


def reference(rows):
    """What the reader must give, computed the plain pandas way: battles as (a, b, outcome, prompt group)."""
    frame = pd.DataFrame(rows)
    a = frame["model_a"].where(frame["model_a"].notna(), "").astype(str).str.strip()
    b = frame["model_b"].where(frame["model_b"].notna(), "").astype(str).str.strip()
    w = frame["winner"].map(battlelog.WINNER_CODES)
    keep = w.notna() & (a != "") & (b != "") & (a != b)
    ids = frame["question_id"]
    text = ids.astype(str).where(ids.notna(), "\x00row" + frame.index.astype(str))
    prompt = pd.factorize(text[keep])[0]
    return list(zip(a[keep], b[keep], w[keep].astype(int), prompt))


def as_battles(table):
    prompt = pd.factorize(table.prompt)[0]
    return [(table.models[i], table.models[j], int(o), int(q))
            for i, j, o, q in zip(table.model_a, table.model_b, table.outcome, prompt)]


@pytest.mark.parametrize("layout", ["plain", "row-groups", "categorical", "large-string", "int-ids", "jsonl"])
def test_every_layout_reads_like_pandas(tmp_path, layout):
    rng = np.random.default_rng(len(layout))
    rows = messy_rows(rng, 700, "int" if layout == "int-ids" else "str")
    path = tmp_path / ("log.jsonl" if layout == "jsonl" else "log.parquet")
    frame = pd.DataFrame(rows)
    if layout == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows))
    elif layout == "categorical":
        frame = frame.astype({c: "category" for c in frame.columns})
        frame.to_parquet(path)
    elif layout == "large-string":
        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.cast(pa.schema([pa.field(c, pa.large_string()) for c in table.column_names]))
        pq.write_table(table, path)
    else:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path,
                       row_group_size=53 if layout == "row-groups" else None)
    table, report = read_battle_log(path)
    assert as_battles(table) == reference(rows)
    assert report.rows == 700 and report.rated == table.n_battles
    assert table.n_prompts == int(table.prompt.max()) + 1  # dense prompt codes
    winners = pd.Series([r["winner"] for r in rows])
    assert report.skipped["unknown winner 'model_c'"] == int((winners == "model_c").sum())
    assert report.skipped["unknown winner '<missing>'"] == int(winners.isna().sum())


def test_question_ids_are_grouped_exactly_even_when_the_hash_collides(monkeypatch):
    rng = np.random.default_rng(2)
    strings = [None if rng.random() < 0.1 else "".join(rng.choice(list("abé0123"), int(rng.integers(0, 25))))
               for _ in range(4000)]
    encoded = [b"" if x is None else x.encode() for x in strings]
    length = np.array([len(e) for e in encoded], dtype=np.int32)
    start = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int32)
    data = np.frombuffer(b"".join(encoded) + bytes(8), dtype=np.uint8)
    valid = np.array([x is not None for x in strings])
    expected, uniques = pd.factorize(np.array(strings, dtype=object))
    for keys in (battlelog._HASH_KEYS, (0, 0)):  # (0, 0): every string hashes to 0
        monkeypatch.setattr(battlelog, "_HASH_KEYS", keys)
        codes, first = battlelog._group_bytes(data, start, length, valid)
        np.testing.assert_array_equal(codes, expected)
        assert [strings[i] for i in first] == list(uniques)


def test_a_unique_id_per_battle_gives_one_prompt_per_battle(tmp_path):
    rows = [{"question_id": f"{i:032x}", "model_a": "x", "model_b": "y", "winner": "model_a" if i % 3 else "tie"}
            for i in range(500)]
    path = tmp_path / "log.parquet"
    pd.DataFrame(rows).to_parquet(path)
    table, _ = read_battle_log(path)
    np.testing.assert_array_equal(table.prompt, np.arange(500))


def test_parquet_errors_are_arena_errors(tmp_path):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ArenaError, match="cannot read battle log"):
        read_battle_log(broken)
    missing = tmp_path / "missing.parquet"
    pd.DataFrame({"model_a": ["x"], "model_b": ["y"]}).to_parquet(missing)
    with pytest.raises(ArenaError, match=r"lacks column\(s\) winner"):
        read_battle_log(missing)
    empty = tmp_path / "empty.parquet"
    pd.DataFrame({"model_a": [], "model_b": [], "winner": []}, dtype=str).to_parquet(empty)
    with pytest.raises(ArenaError, match="has no rows"):
        read_battle_log(empty)


def test_the_cli_and_a_parquet_read_load_no_heavy_module(tmp_path):
    # start-up counts for `arena ratings`: no pandas, scipy or ML library on this path
    path = tmp_path / "log.parquet"
    pd.DataFrame(messy_rows(np.random.default_rng(0), 200)).to_parquet(path)
    code = (
        "import sys; import arena_learning.cli; from arena_learning.rating.battlelog import read_battle_log; "
        f"read_battle_log({str(path)!r}); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pandas', 'scipy', 'sklearn', 'torch', 'sentence_transformers', 'datasets', 'llama_cpp'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
