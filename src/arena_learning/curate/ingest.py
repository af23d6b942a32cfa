"""Ingest: conversation files in the common layouts become ``Prompt`` records.

Layouts (one record per conversation):

- ``sharegpt``: ``{"id", "conversations": [{"from": "human"|"gpt", "value"}]}``
- ``openai``: ``{"id", "messages": [{"role": "user"|"assistant"|"system", "content"}]}``
- ``alpaca``: ``{"instruction", "input", "output"}``
- ``mtbench``: ``{"question_id", "category", "turns": [...], "reference": [...]}``
- ``arenahard``: ``{"uid", "category", "cluster", "prompt"}``

Containers: JSON (a list of records, one record, or ``{"key": [records]}``), JSONL,
Parquet, CSV or TSV (list-valued columns as JSON text) and folders written by
``datasets.Dataset.save_to_disk``.

User turns become ``Prompt.turns``; the assistant turns already in the source are
kept as ``Prompt.reference`` (one per user turn). A prompt's id is the source's own
id, else a hash of its turns, so ingesting the same file twice gives the same records.

A bad line (invalid JSON, not UTF-8, a record of another layout, a record that
breaks its layout) is reported as ``file:line: reason`` and skipped and counted, or,
with ``strict``, raised as an :class:`IngestError`; records read before it are kept
in the accumulator either way, so the caller can store them before stopping.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..readers import ReadError, Row, alpaca_turn, bad_bytes, turns_hash
from ..readers import iter_rows as _iter_rows
from ..records import Prompt
from .settings import SourceFormat, SourceSpec

LAYOUTS: tuple[str, ...] = ("sharegpt", "openai", "alpaca", "mtbench", "arenahard")

# ShareGPT speaker names seen in the wild (FastChat, Vicuna, Bard/Bing scrapes).
_SHAREGPT_USER = {"human", "user"}
_SHAREGPT_ASSISTANT = {"gpt", "chatgpt", "assistant", "bard", "bing", "model"}
_SHAREGPT_SYSTEM = {"system"}

MAX_PROBLEMS = 1000
"""Skipped inputs kept with their location; beyond this only the counts grow."""

_ID_KEYS = ("id", "uid", "question_id", "conversation_id")
_LIST_COLUMNS = ("conversations", "messages", "turns", "reference", "conversation")



IngestError = ReadError
"""A bad input in strict mode, or an input that cannot be read at all."""


class RecordError(ValueError):
    """A record that does not fit its layout; the message is the reason."""


@dataclass(frozen=True)
class Problem:
    """A skipped input: ``where`` is ``file:line`` (``file:row N`` for tables), ``kind`` the count key."""

    where: str
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


# ---- layouts: one record -> one Prompt ---------------------------------------------


def detect_layout(record: Any) -> str | None:
    """Return the layout name a record looks like, or None."""
    if not isinstance(record, dict):
        return None
    if "conversations" in record:
        return "sharegpt"
    if "messages" in record or "conversation" in record:
        return "openai"
    if "instruction" in record:
        return "alpaca"
    if "turns" in record:
        return "mtbench"
    if "prompt" in record:
        return "arenahard"
    return None


def _own_id(record: dict[str, Any]) -> str | None:
    for key in _ID_KEYS:
        value = record.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise RecordError(f"{key!r} must be a string or an integer, not {type(value).__name__}")
        return str(value)
    return None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{what} must be text, not {type(value).__name__}")
    return value


def _list(record: dict[str, Any], key: str) -> list[Any]:
    value = record.get(key)
    if not isinstance(value, list):
        raise RecordError(f"{key!r} must be a list, not {type(value).__name__}")
    if not value:
        raise RecordError(f"{key!r} is empty")
    return value


def _category(record: dict[str, Any]) -> str | None:
    value = record.get("category")
    return value if isinstance(value, str) and value else None


def _prompt(record: dict[str, Any], turns: list[str], source: str, reference: list[str] | None = None,
            meta: dict[str, Any] | None = None) -> Prompt:
    """Return the Prompt of ``record`` with these turns: the record's own id (else the turns' hash) and category."""
    own = _own_id(record)
    return Prompt(id=own if own is not None else turns_hash(turns), turns=turns, source=source,
                  category=_category(record), reference=reference, meta=meta or {})


def _from_dialogue(
    record: dict[str, Any], roles: list[tuple[str, str]], source: str, what: str
) -> Prompt:
    """Return a Prompt from (role, text) pairs: user turns, and assistant turns as references."""
    meta: dict[str, Any] = {}
    system = [text for role, text in roles if role == "system"]
    if system:
        meta["system"] = "\n\n".join(system)
    dialogue = [(role, text) for role, text in roles if role != "system"]
    # Scraped conversations sometimes open with the assistant (a greeting); the arena
    # needs a user turn first, and the greeting is no answer to anything.
    lead = 0
    while lead < len(dialogue) and dialogue[lead][0] != "user":
        lead += 1
    if lead:
        meta["dropped_leading_turns"] = lead
    dialogue = dialogue[lead:]
    if not dialogue:
        raise RecordError(f"{what} has no user turn")
    # Consecutive messages of one speaker are one turn split in two (a paste, a retry).
    merged: list[list[Any]] = []
    for role, text in dialogue:
        if merged and merged[-1][0] == role:
            merged[-1][1] += "\n\n" + text
            meta["merged_turns"] = meta.get("merged_turns", 0) + 1
        else:
            merged.append([role, text])
    turns = [text for role, text in merged if role == "user"]
    answers = [text for role, text in merged if role == "assistant"]
    reference: list[str] | None = None
    if answers and len(answers) == len(turns):
        reference = answers
    elif answers:
        # The last user turn has no answer: a per-turn reference list would be misaligned.
        meta["partial_reference"] = answers
    if "model" in record and isinstance(record["model"], str):
        meta["model"] = record["model"]
    return _prompt(record, turns, source, reference, meta)


def read_sharegpt(record: dict[str, Any], source: str) -> Prompt:
    """Return the Prompt of a ShareGPT record (``conversations`` of ``from``/``value``)."""
    roles: list[tuple[str, str]] = []
    for i, msg in enumerate(_list(record, "conversations")):
        if not isinstance(msg, dict):
            raise RecordError(f"conversations[{i}] must be an object with 'from' and 'value'")
        speaker = msg.get("from")
        text = _text(msg.get("value"), f"conversations[{i}].value")
        if speaker in _SHAREGPT_USER:
            roles.append(("user", text))
        elif speaker in _SHAREGPT_ASSISTANT:
            roles.append(("assistant", text))
        elif speaker in _SHAREGPT_SYSTEM:
            roles.append(("system", text))
        else:
            raise RecordError(f"conversations[{i}].from is {speaker!r}; expected 'human' or 'gpt'")
    return _from_dialogue(record, roles, source, "conversations")


def _message_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RecordError(f"{where}[{j}] is {kind!r} content; only text is supported")
            parts.append(_text(part.get("text"), f"{where}[{j}].text"))
        return "".join(parts)
    if isinstance(content, dict):
        # arena-hard's model answers wrap the text: {"answer": "..."}.
        for key in ("answer", "text", "content"):
            if isinstance(content.get(key), str):
                return content[key]
    raise RecordError(f"{where} must be text or a list of text parts, not {type(content).__name__}")


def read_openai(record: dict[str, Any], source: str) -> Prompt:
    """Return the Prompt of an OpenAI-style record (``messages`` of ``role``/``content``)."""
    key = "messages" if "messages" in record else "conversation"
    roles: list[tuple[str, str]] = []
    for i, msg in enumerate(_list(record, key)):
        if not isinstance(msg, dict):
            raise RecordError(f"{key}[{i}] must be an object with 'role' and 'content'")
        role = msg.get("role")
        if role not in ("user", "assistant", "system"):
            raise RecordError(f"{key}[{i}].role is {role!r}; expected 'user', 'assistant' or 'system'")
        roles.append((role, _message_text(msg.get("content"), f"{key}[{i}].content")))
    return _from_dialogue(record, roles, source, key)


def read_alpaca(record: dict[str, Any], source: str) -> Prompt:
    """Return the Prompt of an Alpaca record: instruction (+ input) as the turn, output as reference."""
    instruction = _text(record.get("instruction"), "'instruction'")
    extra = record.get("input")
    if extra is not None and not isinstance(extra, str):
        raise RecordError(f"'input' must be text, not {type(extra).__name__}")
    turn = alpaca_turn(instruction, extra)
    output = record.get("output")
    if output is not None and not isinstance(output, str):
        raise RecordError(f"'output' must be text, not {type(output).__name__}")
    return _prompt(record, [turn], source, [output] if output else None)


_OWN_FIELDS = frozenset(Prompt.model_fields)
_OWN_MARKS = frozenset({"id", "turns", "source", "cluster", "difficulty", "meta"})


def read_mtbench(record: dict[str, Any], source: str) -> Prompt:
    """Return the Prompt of an MT-Bench question (``turns``, optional per-turn ``reference``).

    A prompt set's own JSONL copy (``WORKSPACE/sets/<name>.jsonl``: every field of a stored prompt)
    is read back whole: its source, category, cluster, difficulty and meta (the diverse/hard halves)
    stay, so a run reading a test set from that file can still be broken down ``--by`` them.
    """
    if _OWN_MARKS <= record.keys() <= _OWN_FIELDS:
        try:
            return Prompt.model_validate(record)
        except ValueError as err:
            raise RecordError(f"a stored prompt that does not validate: {err}".splitlines()[0]) from None
    turns = [_text(t, f"turns[{i}]") for i, t in enumerate(_list(record, "turns"))]
    reference = record.get("reference")
    if reference is not None:
        if not isinstance(reference, list) or not all(isinstance(r, str) for r in reference):
            raise RecordError("'reference' must be a list of texts")
        reference = reference or None
    return _prompt(record, turns, source, reference)


def read_arenahard(record: dict[str, Any], source: str) -> Prompt:
    """Return the Prompt of an arena-hard question (``uid``, ``prompt``); its topic goes to meta."""
    turn = _text(record.get("prompt"), "'prompt'")
    meta: dict[str, Any] = {}
    if isinstance(record.get("cluster"), str):
        # arena-hard's own topic label; Prompt.cluster is ours (k-means), so keep them apart.
        meta["source_cluster"] = record["cluster"]
    return _prompt(record, [turn], source, meta=meta)


READERS: dict[str, Callable[[dict[str, Any], str], Prompt]] = {
    "sharegpt": read_sharegpt,
    "openai": read_openai,
    "alpaca": read_alpaca,
    "mtbench": read_mtbench,
    "arenahard": read_arenahard,
}


# ---- containers: a path -> rows with their location --------------------------------


def iter_rows(path: str | Path) -> Iterator[Row]:
    """Yield the rows of a conversation file (see ``readers.iter_rows``).

    A JSON object of a known layout is one record.
    """
    return _iter_rows(path, is_record=lambda value: detect_layout(value) is not None)


def _decode_list_cells(record: dict[str, Any]) -> dict[str, Any]:
    """Return a CSV row with its list-valued columns (stored as JSON text) decoded."""
    out = dict(record)
    for key in _LIST_COLUMNS:
        value = out.get(key)
        if isinstance(value, str):
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError as err:
                raise RecordError(f"column {key!r} must hold a JSON list ({err.msg})") from None
    return out


# ---- the accumulator ---------------------------------------------------------------


def _fingerprint(p: Prompt) -> str:
    return hashlib.sha1(p.model_dump_json(exclude={"id"}).encode("utf-8")).hexdigest()


@dataclass
class IngestReport:
    """Prompts ingested so far (with unique ids), counts by outcome, and the inputs skipped."""

    prompts: list[Prompt] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    per_source: dict[str, Counter[str]] = field(default_factory=dict)


class Ingestor:
    """Reads sources one after another into one list of prompts with unique, stable ids.

    ``existing`` prompts (a set ingested before) come first; a record that is already
    there is counted ``already_present``, so rerunning an ingest changes nothing. A
    record whose id is taken by different content gets the id ``ID#<hash>`` (counted
    ``id_renamed``): ids stay unique without losing either record.
    """

    def __init__(self, existing: Iterable[Prompt] = (), strict: bool = False):
        self.strict = strict
        self.report = IngestReport()
        self._seen: dict[str, str] = {}
        for p in existing:
            self.report.prompts.append(p)
            self._seen[p.id] = _fingerprint(p)

    @property
    def prompts(self) -> list[Prompt]:
        return self.report.prompts

    def add_source(self, spec: SourceSpec | str | Path, advance: Callable[[int], None] | None = None) -> Counter[str]:
        """Read one source into the accumulator; return its counts. Raises IngestError in strict mode."""
        if not isinstance(spec, SourceSpec):
            spec = SourceSpec(path=str(spec))
        path = Path(spec.path)
        name = spec.name or source_label(path)
        counts: Counter[str] = Counter()
        self.report.per_source[str(path)] = counts
        layout: str | None = None if spec.format == "auto" else spec.format
        is_csv = path.suffix.lower() in (".csv", ".tsv")
        for row in iter_rows(path):
            if advance is not None:
                advance(1)
            if row.kind != "empty_file":
                counts["read"] += 1
                self.report.counts["read"] += 1
            if row.kind is None:
                if bad_bytes(row.data):
                    row.kind, row.reason = "not_utf8", "not valid UTF-8; re-encode the file as UTF-8"
                else:
                    row.kind, row.reason, layout = self._take(row, layout, spec.format, name, is_csv, counts)
            if row.kind is not None:
                self._problem(Problem(row.where, row.kind, row.reason), counts)
        return counts

    def _take(
        self, row: Row, layout: str | None, forced: SourceFormat, name: str, is_csv: bool, counts: Counter[str]
    ) -> tuple[str | None, str, str | None]:
        record = row.data
        if not isinstance(record, dict):
            return "wrong_format", f"a record must be a JSON object, not {type(record).__name__}", layout
        if forced == "auto":
            # The first good record fixes the file's layout; a record of another layout
            # later in the file is a wrong line, not a second layout to mix in.
            found = detect_layout(record)
            keys = ", ".join(sorted(map(str, record)))[:200]
            if layout is None and found is None:
                return "wrong_format", f"unknown record layout (keys: {keys}); force one with --format", layout
            if layout is None:
                layout = found
            elif found != layout:
                return "wrong_format", f"not a {layout} record like the rest of the file (keys: {keys})", layout
        assert layout is not None
        try:
            if is_csv:
                record = _decode_list_cells(record)
            prompt = READERS[layout](record, name)
        except RecordError as err:
            return "bad_record", f"bad {layout} record: {err}", layout
        except ValueError as err:
            # pydantic's ValidationError: a value the Prompt record refuses.
            first = str(err).splitlines()[0]
            return "bad_record", f"bad {layout} record: {first}", layout
        self._add(prompt, counts)
        return None, "", layout

    def _add(self, prompt: Prompt, counts: Counter[str]) -> None:
        fp = _fingerprint(prompt)
        seen = self._seen.get(prompt.id)
        if seen is not None:
            if seen == fp:
                counts["already_present"] += 1
                self.report.counts["already_present"] += 1
                return
            new_id = f"{prompt.id}#{fp[:8]}"
            if self._seen.get(new_id) == fp:
                counts["already_present"] += 1
                self.report.counts["already_present"] += 1
                return
            prompt = prompt.model_copy(update={"id": new_id})
            counts["id_renamed"] += 1
            self.report.counts["id_renamed"] += 1
        self._seen[prompt.id] = fp
        self.report.prompts.append(prompt)
        counts["ingested"] += 1
        self.report.counts["ingested"] += 1

    def _problem(self, problem: Problem, counts: Counter[str]) -> None:
        counts[problem.kind] += 1
        self.report.counts[problem.kind] += 1
        if len(self.report.problems) < MAX_PROBLEMS:
            self.report.problems.append(problem)
        if self.strict:
            raise IngestError(f"{problem} (fix the input, or leave out --strict to skip bad lines and count them)")


def source_label(path: str | Path) -> str:
    """Return the default source label of a file: ``folder/stem`` (``question`` alone says too little)."""
    p = Path(path).resolve()
    stem = p.name if p.is_dir() else p.stem
    return f"{p.parent.name}/{stem}" if p.parent.name else stem


def ingest(
    sources: Iterable[SourceSpec | str | Path],
    existing: Iterable[Prompt] = (),
    strict: bool = False,
) -> IngestReport:
    """Return the prompts of ``sources`` (after ``existing``), counts and skipped inputs."""
    acc = Ingestor(existing, strict=strict)
    for spec in sources:
        acc.add_source(spec)
    return acc.report
