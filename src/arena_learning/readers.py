"""One reader for every record file the project takes: JSON, JSON Lines, CSV/TSV, Parquet, dataset folders.

Each row comes with its location, ``file:line`` (``file:row N`` for Parquet and dataset
folders), so every reader of user files reports a bad line the same way: the ingest of
conversations, imported answers, human labels. A row that cannot be read is yielded with a
``kind`` (the count key: ``bad_json``, ``not_utf8``, ``bad_record``, ``empty_file``) and a
reason instead of data, so the caller decides whether to skip and count it or to stop. A file
that cannot be read at all raises :class:`ReadError`.

A gzipped file (``.jsonl.gz``, ``.json.gz``, ``.csv.gz``, ...) is read as the file inside it, with the
same line numbers; ``.zst`` is refused with what to do (no zstd library is a dependency).

Written by hand where no library does it: line numbers of the records inside one JSON
document (``json`` gives only the offset of an error), and bytes that are not UTF-8 reported
on their own line while the rest of the file stays readable.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ArenaError

# U+DC80..U+DCFF: where ``surrogateescape`` puts bytes that are not UTF-8.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")

# Public files the examples read (examples/README.md), by the end of their path: where to get each one.
_ARENA_HARD = "https://github.com/lmarena/arena-hard-auto"
_FASTCHAT = "https://github.com/lm-sys/FastChat"
PUBLIC_DATA: dict[str, str] = {
    "arena-hard-v0.1/question.jsonl": f"{_ARENA_HARD} (data/arena-hard-v0.1/question.jsonl)",
    "arena-hard-v0.1/model_answer/": f"{_ARENA_HARD} (data/arena-hard-v0.1/model_answer/)",
    "mt_bench/question.jsonl": f"{_FASTCHAT} (fastchat/llm_judge/data/mt_bench/question.jsonl)",
    "mt_bench/reference_answer/": f"{_FASTCHAT} (fastchat/llm_judge/data/mt_bench/reference_answer/)",
    "vicuna_bench/question.jsonl": f"{_FASTCHAT} (fastchat/llm_judge/data/vicuna_bench/question.jsonl)",
    "sharegpt_sample/dummy_conversation.json": f"{_FASTCHAT} (data/dummy_conversation.json)",
}


def missing_file(path: str | Path) -> str:
    """Return what to say about an input ``path`` that does not exist: where it was looked for, where to get it."""
    p = Path(path)
    where = "" if p.is_absolute() else f" (a relative path is read from the directory you run in, {Path.cwd()})"
    posix = p.as_posix()
    origin = next((url for tail, url in PUBLIC_DATA.items()
                   if posix.endswith(tail) or (tail.endswith("/") and f"/{tail}" in f"/{posix}")), None)
    get = (f"; it is public data: download it from {origin} and put it there, or change the path in the config"
           if origin else "; give the path of your data in the config (examples/README.md names each example's data)")
    return f"{p}: no such file or folder{where}{get}"


IsRecord = Callable[[dict[str, Any]], bool]
"""Whether a top-level JSON object is itself a record (else its one list of objects holds the records)."""


class ReadError(ArenaError):
    """A file or folder that cannot be read at all (missing, unknown type, not Parquet, not a dataset)."""


@dataclass
class Row:
    """One row of a file: its location and data, or (``kind`` set) why it could not be read."""

    where: str
    data: Any = None
    kind: str | None = None  # set when the row could not be read: the count key
    reason: str = ""


def bad_bytes(value: Any) -> bool:
    """Return whether a decoded value holds bytes that were not UTF-8 (escaped by ``surrogateescape``)."""
    if isinstance(value, str):
        return bool(_ESCAPED_BYTE.search(value))
    if isinstance(value, dict):
        return any(bad_bytes(k) or bad_bytes(v) for k, v in value.items())
    if isinstance(value, list):
        return any(bad_bytes(v) for v in value)
    return False


def _utf8_reason(raw: bytes) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1}); re-encode the file as UTF-8"
    return "not valid UTF-8; re-encode the file as UTF-8"


def _iter_jsonl_bytes(path: Path, lines: Iterable[tuple[int, bytes]]) -> Iterator[Row]:
    decoder = json.JSONDecoder()
    for lineno, raw in lines:
        where = f"{path}:{lineno}"
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield Row(where, kind="not_utf8", reason=_utf8_reason(raw))
            continue
        try:
            value, end = decoder.raw_decode(line.strip())
        except json.JSONDecodeError as err:
            yield Row(where, kind="bad_json", reason=f"invalid JSON at column {err.colno}: {err.msg}")
            continue
        if line.strip()[end:].strip():
            yield Row(where, kind="bad_json", reason=f"invalid JSON: extra data after column {end}")
            continue
        yield Row(where, value)


def _open_bytes(path: Path) -> gzip.GzipFile | io.BufferedReader:
    """Open ``path`` for reading bytes, through gzip when it is gzipped."""
    return gzip.open(path, "rb") if _gzipped(path) else open(path, "rb")


def _read_bytes(path: Path) -> bytes:
    try:
        with _open_bytes(path) as fh:
            return fh.read()
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError; a cut-off file an EOFError
        raise ReadError(f"{path}: not a readable gzip file ({err})") from None


def _gzipped(path: Path) -> bool:
    return path.suffix.lower() == ".gz"


def _iter_jsonl(path: Path) -> Iterator[Row]:
    try:
        with _open_bytes(path) as fh:
            yield from _iter_jsonl_bytes(path, enumerate(fh, 1))
    except (gzip.BadGzipFile, EOFError) as err:
        raise ReadError(f"{path}: not a readable gzip file ({err})") from None


class _LineCounter:
    """Line number of a character offset, for offsets that only grow."""

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def at(self, offset: int) -> int:
        self.line += self.text.count("\n", self.pos, offset)
        self.pos = offset
        return self.line


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i


def _iter_json(path: Path, is_record: IsRecord | None = None) -> Iterator[Row]:
    raw = _read_bytes(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    # surrogateescape keeps the rest of a file readable when one record holds bad bytes;
    # that record is then reported on its own line (see _bad_bytes).
    text = raw.decode("utf-8", errors="surrogateescape")
    lines = _LineCounter(text)
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if text.startswith("{", i):
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as err:
            yield Row(f"{path}:{err.lineno}", kind="bad_json", reason=f"invalid JSON at column {err.colno}: {err.msg}")
            return
        if _skip_ws(text, end) < len(text):
            # More values follow the first object: this is JSON Lines named .json.
            yield from _iter_jsonl_bytes(path, enumerate(raw.splitlines(keepends=True), 1))
            return
        records = _records_of_object(value, is_record)
        if records is None:
            yield Row(f"{path}:{lines.at(i)}", value)
        else:
            key = next(k for k, v in value.items() if v is records)
            starts = _item_starts(text, _member_starts(text, i, decoder)[key], decoder)
            for record, start in zip(records, starts):
                yield Row(f"{path}:{lines.at(start)}", record)
        return
    if not text.startswith("[", i):
        yield Row(f"{path}:{lines.at(i)}", kind="bad_json", reason="expected a JSON list or object")
        return
    i += 1
    while True:
        i = _skip_ws(text, i)
        if i >= len(text):
            yield Row(
                f"{path}:{lines.at(i)}",
                kind="bad_json",
                reason="the file ends inside the top-level list (truncated?); records before this line were read",
            )
            return
        if text[i] == "]":
            return
        start_line = lines.at(i)
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as err:
            # There is no reliable way to find the next record after broken JSON: stop here.
            yield Row(
                f"{path}:{err.lineno}",
                kind="bad_json",
                reason=f"invalid JSON at column {err.colno}: {err.msg}; the rest of the file was not read",
            )
            return
        yield Row(f"{path}:{start_line}", value)
        i = _skip_ws(text, end)
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] == "]":
            return
        elif i < len(text):
            yield Row(f"{path}:{lines.at(i)}", kind="bad_json", reason="expected ',' or ']' after a record")
            return


def _member_starts(text: str, i: int, decoder: json.JSONDecoder) -> dict[str, int]:
    """Return the offset of each member's value in the valid JSON object at ``text[i]``, by key."""
    # A repeated key keeps its last offset, as json keeps its last value.
    starts: dict[str, int] = {}
    i = _skip_ws(text, i + 1)
    while text[i] != "}":
        key, i = decoder.raw_decode(text, i)
        i = _skip_ws(text, _skip_ws(text, i) + 1)  # past the ':'
        starts[key] = i
        _, i = decoder.raw_decode(text, i)
        i = _skip_ws(text, i)
        if text[i] == ",":
            i = _skip_ws(text, i + 1)
    return starts


def _item_starts(text: str, i: int, decoder: json.JSONDecoder) -> list[int]:
    """Return the offset of each item of the valid JSON list at ``text[i]``, in order."""
    starts: list[int] = []
    i = _skip_ws(text, i + 1)
    while text[i] != "]":
        starts.append(i)
        _, i = decoder.raw_decode(text, i)
        i = _skip_ws(text, i)
        if text[i] == ",":
            i = _skip_ws(text, i + 1)
    return starts


def _records_of_object(value: dict[str, Any], is_record: IsRecord | None) -> list[Any] | None:
    """Return the records of ``{"key": [records]}``, or None when the object is itself a record."""
    if is_record is not None and is_record(value):
        return None
    lists = [v for v in value.values() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    return lists[0] if len(lists) == 1 else None


def _cell(value: str) -> Any:
    return None if value == "" else value


def _iter_csv(path: Path) -> Iterator[Row]:
    # Conversations can be long: lift the csv module's 128 KiB cell limit.
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    tsv = _inner_suffix(path) == ".tsv"
    with io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t" if tsv else ",")
        start = 2
        try:
            for row in reader:
                where = f"{path}:{start}"
                start = reader.line_num + 1
                if None in row:
                    yield Row(where, kind="bad_record", reason="more cells than the header has columns")
                    continue
                yield Row(where, {k: _cell(v) if v is not None else None for k, v in row.items()})
        except csv.Error as err:
            yield Row(f"{path}:{reader.line_num}", kind="bad_record", reason=f"invalid CSV: {err}")


def _iter_parquet(path: Path) -> Iterator[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise ReadError(f"{path}: not a readable Parquet file ({err})") from None
    n = 0
    for batch in table.iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            n += 1
            yield Row(f"{path}:row {n}", row)


def _iter_hf_folder(path: Path) -> Iterator[Row]:
    if not any((path / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
        raise ReadError(
            f"{path}: a folder must be a dataset saved with datasets' save_to_disk "
            "(no dataset_info.json, state.json or dataset_dict.json here)"
        )
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as err:
        raise ReadError(
            f"{path}: not a loadable dataset folder ({err}); save it again with datasets' save_to_disk, "
            "or give the data files inside it"
        ) from None
    splits = loaded.items() if isinstance(loaded, datasets.DatasetDict) else [(None, loaded)]
    for split, ds in splits:
        label = f"{path}[{split}]" if split is not None else str(path)
        for n, row in enumerate(ds, 1):
            yield Row(f"{label}:row {n}", row)


def _inner_suffix(path: Path) -> str:
    """Return the file type's suffix, lower case: that of the file inside a ``.gz``."""
    return Path(path.stem).suffix.lower() if _gzipped(path) else path.suffix.lower()


def _container(path: Path) -> str:
    if path.is_dir():
        return "hf"
    if path.suffix.lower() in (".zst", ".zstd"):
        raise ReadError(f"{path}: zstd-compressed files are not read here; decompress it (`zstd -d {path.name}`) "
                        "or recompress it with gzip (.gz files are read as they are)")
    suffix = _inner_suffix(path)
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        return "json"
    if suffix in (".parquet", ".pq"):
        if _gzipped(path):
            raise ReadError(f"{path}: a gzipped Parquet file; Parquet compresses itself: give the .parquet file")
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return "csv"
    with _open_bytes(path) as fh:
        try:
            head = fh.read(4096)
        except (OSError, EOFError) as err:
            raise ReadError(f"{path}: not a readable gzip file ({err})") from None
    if head.startswith(b"PAR1") and not _gzipped(path):
        return "parquet"
    stripped = head.lstrip()
    if stripped.startswith(b"["):
        return "json"
    if stripped.startswith(b"{"):
        return "jsonl"
    raise ReadError(f"{path}: unknown file type; use .json, .jsonl, .parquet, .csv (any of them but Parquet "
                    "may be gzipped: .jsonl.gz) or a dataset folder")


def _is_empty(path: Path) -> bool:
    if _gzipped(path):
        with _open_bytes(path) as fh:
            try:
                head = fh.read(1 << 16)
            except (OSError, EOFError) as err:
                raise ReadError(f"{path}: not a readable gzip file ({err})") from None
        return len(head) < 1 << 16 and not head.strip()
    size = path.stat().st_size
    # Only a small file can be all whitespace in practice; never read a big one twice.
    return size == 0 or (size < 1 << 16 and not path.read_bytes().strip())


def iter_rows(path: str | Path, is_record: IsRecord | None = None) -> Iterator[Row]:
    """Yield the rows of a file or dataset folder with their ``file:line`` (or ``file:row N``).

    ``is_record`` tells a JSON document that is one record from ``{"key": [records]}``.
    """
    p = Path(path)
    if not p.exists():
        raise ReadError(missing_file(p))
    kind = _container(p)
    if kind != "hf" and _is_empty(p):
        yield Row(f"{p}:1", kind="empty_file", reason="the file is empty")
        return
    if kind == "jsonl":
        yield from _iter_jsonl(p)
    elif kind == "json":
        yield from _iter_json(p, is_record)
    elif kind == "csv":
        yield from _iter_csv(p)
    elif kind == "parquet":
        yield from _iter_parquet(p)
    else:
        yield from _iter_hf_folder(p)


def turns_hash(turns: list[str]) -> str:
    """Return a short stable hash of user turns: the id of a prompt whose source gives none (ingest and
    the import of AlpacaEval outputs, which carry only the instruction, both name prompts so)."""
    blob = json.dumps(turns, ensure_ascii=False, separators=(",", ":"))
    return "h" + hashlib.sha1(blob.encode("utf-8")).hexdigest()[:16]


def alpaca_turn(instruction: str, extra: str | None) -> str:
    """Return the user turn of an Alpaca-style record: the instruction, then its ``input`` if any."""
    return f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction
