"""Read battle logs from elsewhere: the Chatbot Arena / FastChat format.

Columns ``model_a``, ``model_b`` and ``winner`` (``model_a``, ``model_b``, ``tie`` or
``tie (bothbad)``), in JSON (a list of records), JSONL or Parquet; CSV too. A
``question_id`` column, when present, groups battles by prompt for the prompt bootstrap;
otherwise each battle is its own prompt. Rows that cannot be rated (an unknown winner, a
missing model, a model against itself) are counted by reason in the report, never
dropped silently.

A log is reduced to a ``BattleTable`` without a Python object per battle. Each column
becomes integer codes plus the text of each distinct value, so string work happens once
per distinct model name or winner label and everything per row is numpy on codes:

* Parquet: only the needed columns are read, with pyarrow's Parquet reader alone. Names
  and labels come as dictionaries straight from Parquet's dictionary pages; question ids
  are grouped in numpy from the string buffers (hashed 8 bytes at a time, then checked
  byte for byte). Nothing here calls pyarrow.compute, whose first use costs about 0.3 s
  and 50 MB, more than reading a million battles.
* JSON, JSONL and CSV: parsed by pandas, each column coded with ``pandas.factorize``.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArenaError
from .counts import A_WINS, B_WINS, TIE, BattleTable

WINNER_CODES = {"model_a": A_WINS, "model_b": B_WINS, "tie": TIE, "tie (bothbad)": TIE}
"""FastChat's winner labels; both tie labels are ties for the ratings."""

PROMPT_COLUMNS = ("question_id", "prompt_id")

REQUIRED_COLUMNS = ("model_a", "model_b", "winner")

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

Coded = tuple[np.ndarray, list]
"""A column as (integer codes (N,), -1 where missing; the text of each code, empty when not asked)."""


@dataclass
class BattleLogReport:
    """What reading a battle log kept and what it left out."""

    path: str
    rows: int
    rated: int
    prompt_column: str | None
    skipped: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"{self.path}: {self.rows} rows, {self.rated} rated"]
        if self.prompt_column is None:
            out.append("no question_id column: each battle is resampled on its own")
        for reason, n in sorted(self.skipped.items(), key=lambda kv: -kv[1]):
            out.append(f"skipped {n} row(s): {reason}")
        return out


def _first_bad_line(path: Path) -> str | None:
    """Return ``path:line`` of the first line of a JSONL file that is not one JSON object, or None."""
    with (gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")) as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except ValueError:  # invalid JSON or not UTF-8
                return f"{path}:{lineno}"
            if not isinstance(value, dict):
                return f"{path}:{lineno}"
    return None


def read_battle_log(path: str | Path) -> tuple[BattleTable, BattleLogReport]:
    """Return the rateable battles of the log at ``path`` and a report of the rest.

    Model names are stripped of surrounding whitespace (an empty name is a missing model);
    winner labels must match ``WINNER_CODES`` exactly; values of any type are compared as
    text. Models are numbered in order of first appearance (``model_a`` before
    ``model_b``), leaving out names without a rateable battle; prompt codes are dense.
    """
    p = Path(path)
    if not p.is_file():
        raise ArenaError(f"battle log not found: {p} (give a .json, .jsonl or .parquet file)")
    # a gzipped log (.jsonl.gz, .json.gz, .csv.gz) is read as the file inside it (pandas infers gzip)
    suffix = Path(p.stem).suffix.lower() if p.suffix.lower() == ".gz" else p.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".ndjson", ".json", ".csv") or (suffix == ".parquet" and p.suffix == ".gz"):
        raise ArenaError(f"battle log {p} has an unknown extension {suffix!r}: use .json, .jsonl, .parquet or .csv "
                         "(all but Parquet may be gzipped: .jsonl.gz)")
    columns, n = _read_parquet(p) if suffix == ".parquet" else _read_with_pandas(p, suffix)
    if n == 0:
        raise ArenaError(f"battle log {p} has no rows")
    return _reduce(p, columns, n)


def _missing_columns_error(p: Path, names: list[str]) -> ArenaError | None:
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if not missing:
        return None
    return ArenaError(
        f"battle log {p} lacks column(s) {', '.join(missing)} (columns: {', '.join(map(str, names))}); "
        "the Chatbot Arena format has model_a, model_b and winner"
    )


# --------------------------------------------------------------------------- readers


def _read_parquet(p: Path) -> tuple[dict[str, Coded], int]:
    """Return the needed columns of a Parquet log, coded (labels for names and winners only)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset and compute
        file = pq.ParquetFile(p)
        schema = file.schema_arrow
        names = list(schema.names)
        if (err := _missing_columns_error(p, names)) is not None:
            raise err
        prompt_col = next((c for c in PROMPT_COLUMNS if c in names), None)
        wanted = list(REQUIRED_COLUMNS) + ([prompt_col] if prompt_col else [])
        # few distinct names and labels: read them as the dictionaries Parquet stores them in
        as_dictionary = [c for c in REQUIRED_COLUMNS if _is_text(schema.field(c).type)]
        if file.metadata.num_rows == 0:
            return {}, 0
        file = pq.ParquetFile(p, read_dictionary=as_dictionary, pre_buffer=False)
        coded = {}
        for c in wanted:  # one column at a time: its Arrow buffers are freed once it is coded
            column = file.read(columns=[c], use_threads=False).column(0)
            coded[c] = _code_arrow(column, labels=c != prompt_col)
            del column
    except (pa.ArrowException, ValueError, OSError) as err:
        raise ArenaError(f"cannot read battle log {p}: {err}") from None
    return coded, file.metadata.num_rows


def _read_with_pandas(p: Path, suffix: str) -> tuple[dict[str, Coded], int]:
    """Parse a JSON, JSONL or CSV log with pandas; return its needed columns, coded."""
    import pandas as pd

    try:
        if suffix in (".jsonl", ".ndjson"):
            try:
                frame = pd.read_json(p, lines=True, dtype=False)
            except ValueError as err:
                raise ArenaError(f"cannot read battle log {_first_bad_line(p) or p}: {err}") from None
        elif suffix == ".json":
            try:
                frame = pd.read_json(p, dtype=False)
            except ValueError:
                frame = pd.read_json(p, lines=True, dtype=False)  # JSONL saved as .json
        else:
            frame = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""])
    except (ValueError, OSError) as err:
        raise ArenaError(f"cannot read battle log {p}: {err}") from None
    names = list(frame.columns)
    if (missing := _missing_columns_error(p, names)) is not None:
        raise missing
    prompt_col = next((c for c in PROMPT_COLUMNS if c in names), None)
    wanted = list(REQUIRED_COLUMNS) + ([prompt_col] if prompt_col else [])
    return {c: _code_series(frame[c]) for c in wanted}, len(frame)


# --------------------------------------------------------------------------- coding columns


def _code_series(column: pd.Series) -> Coded:
    """Code a pandas column as text (1 and "1" are one value, as in the Chatbot Arena tools)."""
    import pandas as pd

    values = column.astype(object)
    text = values.astype(str).where(values.notna(), None)
    codes, uniques = pd.factorize(text.to_numpy(dtype=object))
    return codes.astype(np.int64), [str(u) for u in uniques]


def _is_text(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _code_arrow(column: pa.ChunkedArray, *, labels: bool) -> Coded:
    """Code a pyarrow column from its buffers (see the module docstring); labels only when asked.

    Dictionary columns use their indices; text columns are grouped by ``_group_bytes``;
    integer and float columns by value (NaN is missing). Other types are cast to text
    first (the one path that uses pyarrow.compute).
    """
    import pyarrow as pa

    t = column.type
    if pa.types.is_dictionary(t):
        return _code_dictionary_chunks(column.chunks)
    if _is_text(t):
        return _code_text_chunks(column.chunks, labels=labels)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        values = np.concatenate([_values(c) for c in column.chunks]) if column.num_chunks else np.zeros(0)
        valid = np.concatenate([_validity(c) for c in column.chunks]) if column.num_chunks else np.zeros(0, bool)
        if values.dtype.kind == "f":
            valid &= ~np.isnan(values)
        order = np.argsort(values, kind="stable")
        codes, first = _group_sorted(values, order, valid)
        return codes, ([str(v) for v in values[first].tolist()] if labels else [])
    return _code_text_chunks(column.cast(pa.string()).chunks, labels=labels)


def _validity(arr: pa.Array) -> np.ndarray:
    """Return bool (len,): which entries are not null, from the validity bitmap."""
    n = len(arr)
    buf = arr.buffers()[0]
    if buf is None or arr.null_count == 0:
        return np.ones(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + n].astype(bool)


def _values(arr: pa.Array) -> np.ndarray:
    """Return the fixed-width values of a numeric array (garbage where null), zero-copy."""
    dtype = np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr)]


def _code_dictionary_chunks(chunks: list) -> Coded:
    """Code dictionary chunks (each with its own dictionary) into one numbering of their values as text."""
    index: dict[str | None, int] = {}
    parts = []
    for chunk in chunks:
        text = [None if v is None else (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v))
                for v in chunk.dictionary.to_pylist()]
        to_code = np.array([-1 if v is None else index.setdefault(v, len(index)) for v in text] + [-1], dtype=np.int32)
        idx = _values(chunk.indices)
        if chunk.indices.null_count:
            idx = np.where(_validity(chunk.indices), idx, -1)  # -1: the last entry, missing
        parts.append(to_code[idx])
    codes = np.concatenate(parts) if len(parts) != 1 else parts[0]
    return codes, list(index)


def _code_text_chunks(chunks: list, *, labels: bool) -> Coded:
    """Code string/binary chunks by their bytes; labels (UTF-8 text) of the distinct values when asked."""
    import pyarrow as pa

    if not chunks:
        return np.zeros(0, dtype=np.int64), []
    parts = []
    for chunk in chunks:
        n = len(chunk)
        bufs = chunk.buffers()
        large = chunk.type in (pa.large_string(), pa.large_binary())
        offsets = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)[chunk.offset : chunk.offset + n + 1]
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
        parts.append((offsets, data, _validity(chunk)))
    total = sum(int(o[-1] - o[0]) for o, _, _ in parts)
    index_type = np.int64 if total >= 2**31 - 8 else np.int32  # int32 positions unless the bytes need more
    data = np.concatenate([d[o[0] : o[-1]] for o, d, _ in parts] + [np.zeros(8, dtype=np.uint8)])  # padded
    starts, base = [], 0
    for o, _, _ in parts:
        starts.append(o[:-1].astype(index_type) + (base - o[0]))
        base += int(o[-1] - o[0])
    start = np.concatenate(starts)
    length = np.concatenate([np.diff(o).astype(index_type) for o, _, _ in parts])
    valid = np.concatenate([v for _, _, v in parts])
    codes, first = _group_bytes(data, start, length, valid)
    if not labels:
        return codes, []
    text = [bytes(data[start[i] : start[i] + length[i]]).decode("utf-8", "replace") for i in first.tolist()]
    return codes, text


_BLOCK = 1 << 16
"""Rows hashed or compared per numpy pass: bounds the temporaries to a few MB."""

_HASH_KEYS = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9)
"""Odd 64-bit multipliers of the string hash (golden ratio, splitmix64)."""


def _group_bytes(data: np.ndarray, start: np.ndarray, length: np.ndarray, valid: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Group byte strings ``data[start:start+length]``; return (codes (N,), first row of each code).

    ``data`` must have 8 bytes of padding after the last string. Each string is hashed 8
    bytes at a time (numpy, one pass per 8 bytes of the longest string, in blocks of rows),
    rows are grouped by hash, and every row is then compared with its group's first row
    word for word, so a hash collision can never merge two different ids; in that
    (astronomically rare) case the grouping is redone exactly by sorting the strings.
    Codes follow first appearance; invalid (null) rows get -1.
    """
    n = start.shape[0]
    # words[p] = the 8 bytes data[p:p+8], little-endian: an overlapping, unaligned view
    words = np.ndarray(shape=(max(data.shape[0] - 7, 0),), dtype="<u8", buffer=data, strides=(1,))
    full = np.uint64(2**64 - 1)

    def word(s: np.ndarray, rest: np.ndarray) -> np.ndarray:
        """The 8-byte words at ``s``, bytes past ``rest`` (bytes left in the string) zeroed."""
        mask = np.where(rest >= 8, full, (np.uint64(1) << (np.uint64(8) * np.clip(rest, 0, 7).astype(np.uint64))) - 1)
        return words[np.where(rest > 0, s, 0)] & mask  # a string that has ended reads word 0, masked to 0

    k0, k1 = (np.uint64(k) for k in _HASH_KEYS)
    h = np.empty(n, dtype=np.uint64)
    for lo in range(0, n, _BLOCK):
        s, ln = start[lo : lo + _BLOCK], length[lo : lo + _BLOCK]
        x = ln.astype(np.uint64) * k0
        for w in range(int(-(-ln.max() // 8)) if ln.size else 0):
            x ^= word(s + 8 * w, ln - 8 * w)  # zero past the end: shorter strings differ by length
            x *= k1
            x ^= x >> np.uint64(31)
        h[lo : lo + _BLOCK] = x
    order = np.argsort(h)
    if valid.all():
        sorted_h = h[order]
        if (sorted_h[1:] != sorted_h[:-1]).all():
            # every hash differs, so every string does: each row is its own id (e.g. a Chatbot
            # Arena dump, one question per battle); nothing to group or check
            rows = np.arange(n, dtype=np.int64)
            return rows, rows
        del sorted_h
    codes, first = _group_sorted(h, order, valid)
    del h, order

    same = True
    for lo in range(0, n, _BLOCK):
        c = codes[lo : lo + _BLOCK]
        ok = c >= 0
        mine = np.arange(lo, lo + c.shape[0])[ok]
        rep = first[c[ok]]
        eq = length[mine] == length[rep]
        for w in range(int(-(-length[mine].max() // 8)) if mine.size else 0):
            rest = length[mine] - 8 * w
            eq &= word(start[mine] + 8 * w, rest) == word(start[rep] + 8 * w, rest)
        if not eq.all():
            same = False
            break
    if not same:  # a hash collision: group exactly, by the strings themselves
        width = max(int(length.max()), 1)
        fixed = np.zeros((n, width + 8), dtype=np.uint8)
        for j in range(width):
            has = length > j
            fixed[has, j] = data[start[has] + j]
        fixed[:, width:] = length.astype("<u8").view(np.uint8).reshape(n, 8)
        keys = fixed.view(f"V{width + 8}").ravel()
        codes, first = _group_sorted(keys, np.argsort(keys, kind="stable"), valid)
    return codes, first


def _group_sorted(keys: np.ndarray, order: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (codes (N,), first row of each code): equal keys share a code, numbered by first appearance.

    ``order`` sorts ``keys``; rows where ``valid`` is False get -1 and make no code.
    """
    if not valid.all():
        order = order[valid[order]]
    if order.shape[0] == 0:
        return np.full(keys.shape[0], -1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sk = keys[order]
    new = np.empty(sk.shape[0], dtype=bool)
    new[0] = True
    new[1:] = sk[1:] != sk[:-1]
    del sk
    starts = np.flatnonzero(new)
    del new
    first = np.minimum.reduceat(order, starts)  # earliest row of each group
    by_appearance = np.argsort(first, kind="stable")
    rank = np.empty_like(by_appearance)
    rank[by_appearance] = np.arange(by_appearance.shape[0])
    codes = np.full(keys.shape[0], -1, dtype=np.int64)
    codes[order] = np.repeat(rank, np.diff(np.append(starts, order.shape[0])))
    return codes, first[by_appearance]


# --------------------------------------------------------------------------- the table


def _reduce(p: Path, columns: dict[str, Coded], n: int) -> tuple[BattleTable, BattleLogReport]:
    """Reduce the coded columns to a ``BattleTable`` and a report, vectorised on integer codes."""
    skipped: Counter[str] = Counter()
    # winner: one lookup per distinct label; code -1 (missing) indexes the last entry
    win_codes, win_labels = columns["winner"]
    labels = [*win_labels, "<missing>"]
    code = np.array([WINNER_CODES.get(lab, -1) for lab in labels], dtype=np.int8)[win_codes]
    unknown = code < 0
    if unknown.any():
        per_label = np.bincount(win_codes[unknown] % len(labels), minlength=len(labels))
        for j in np.argsort(-per_label, kind="stable")[: np.count_nonzero(per_label)]:  # most frequent first
            skipped[f"unknown winner {labels[j]!r}"] += int(per_label[j])

    # model names: stripped once per distinct name; both columns map into one numbering
    canonical: dict[str, int] = {}

    def model_codes(coded: Coded) -> np.ndarray:
        codes, names = coded
        to_model = [canonical.setdefault(x, len(canonical)) if x else -1 for x in (s.strip() for s in names)]
        return np.array([*to_model, -1], dtype=np.int32)[codes]  # -1: missing (last entry) or blank

    a = model_codes(columns["model_a"])
    b = model_codes(columns["model_b"])
    no_model = (a < 0) | (b < 0)
    skipped["model_a or model_b missing"] += int((no_model & ~unknown).sum())
    self_battle = ~no_model & (a == b)
    skipped["a model against itself"] += int((self_battle & ~unknown).sum())
    keep = ~(unknown | no_model | self_battle)
    skipped = Counter({k: v for k, v in skipped.items() if v})
    if not keep.any():
        raise ArenaError(
            f"battle log {p}: none of its {n} rows can be rated ("
            + "; ".join(f"{v} {k}" for k, v in skipped.items())
            + ")"
        )
    m = int(keep.sum())
    a, b = a[keep], b[keep]
    # leave out names without a rateable battle; keep the order of first appearance
    rated = np.bincount(np.concatenate([a, b]), minlength=len(canonical)) > 0
    renumber = np.cumsum(rated) - 1
    models = tuple(name for name, r in zip(canonical, rated) if r)

    prompt_col = next((c for c in PROMPT_COLUMNS if c in columns), None)
    if prompt_col:
        ids = columns[prompt_col][0]
        ids = ids.astype(np.int64) if m == n else ids[keep].astype(np.int64)
        own = ids < 0  # a row without a prompt id is a prompt of its own, never lumped with the others
        present = np.bincount(ids[~own] if own.any() else ids, minlength=1) > 0
        if not present.all():  # codes of dropped rows or unused dictionary entries: make them dense
            ids = np.where(own, -1, (np.cumsum(present) - 1)[np.maximum(ids, 0)])
        ids[own] = int(present.sum()) + np.arange(int(own.sum()))
        prompt = ids
    else:
        prompt = np.arange(m, dtype=np.int64)
    table = BattleTable(
        models, renumber[a].astype(np.int32), renumber[b].astype(np.int32), code[keep].astype(np.int8), prompt
    )
    return table, BattleLogReport(str(p), n, m, prompt_col, dict(skipped))
