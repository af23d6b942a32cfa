"""The workspace: one directory with ``arena.db`` (SQLite in WAL mode).

It holds the ledger of every model call and the artifacts of every stage
(prompts, answers, judgments, battles), each as the JSON of its record so a
person can open the file with ``sqlite3`` and read it.

The ledger is what makes runs resumable: a call is keyed by a hash of
(engine, model, params, messages); a success is stored once and never requested
again; a failure is recorded with its error and retried on the next run, never
used as an answer. Every success is committed as it arrives, so a process killed
at any moment loses nothing that had come back.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ArenaError
from .records import Answer, Battle, Judgment, Prompt

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    engine TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT,
    status TEXT NOT NULL,          -- 'ok' or 'error'
    error TEXT,
    tokens_in INTEGER DEFAULT 0,
    tokens_out INTEGER DEFAULT 0,
    latency_s REAL DEFAULT 0,
    attempts INTEGER DEFAULT 1,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS prompts (
    set_name TEXT NOT NULL,
    id TEXT NOT NULL,
    pos INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (set_name, id)
);
CREATE TABLE IF NOT EXISTS answers (
    prompt_id TEXT NOT NULL,
    model TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (prompt_id, model)
);
CREATE TABLE IF NOT EXISTS judgments (
    prompt_id TEXT NOT NULL,
    model_a TEXT NOT NULL,
    model_b TEXT NOT NULL,
    judge TEXT NOT NULL,
    status TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (prompt_id, model_a, model_b, judge)
);
CREATE TABLE IF NOT EXISTS battles (
    prompt_id TEXT NOT NULL,
    model_a TEXT NOT NULL,
    model_b TEXT NOT NULL,
    judge TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (prompt_id, model_a, model_b, judge)
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


def call_key(engine: str, model: str, params: dict[str, Any], payload: Any) -> str:
    """Return the ledger key of a call: sha256 over its canonical JSON."""
    blob = json.dumps(
        {"engine": engine, "model": model, "params": params, "payload": payload},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CallRecord:
    """A ledger row as the caller sees it."""

    key: str
    status: str
    response: dict[str, Any] | None
    error: str | None
    attempts: int


class Store:
    """A workspace directory and its SQLite database."""

    def __init__(self, workspace: str | Path):
        self.root = Path(workspace)
        self.path = self.root / "arena.db"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we open transactions ourselves, so a batch is one commit.
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as err:
            raise ArenaError(f"cannot use {self.root} as a workspace ({err}): give a directory you can write to") from None
        self.db.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable against a killed process (not a power cut) and far faster than FULL.
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the ledger -------------------------------------------------------------
    def lookup_calls(self, keys: Sequence[str]) -> dict[str, CallRecord]:
        """Return the ledger rows for ``keys`` that exist (ok and error alike)."""
        found: dict[str, CallRecord] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT key, status, response, error, attempts FROM calls WHERE key IN ({marks})", chunk
            )
            for key, status, response, error, attempts in rows:
                found[key] = CallRecord(key, status, json.loads(response) if response else None, error, attempts)
        return found

    def record_calls(self, rows: Iterable[dict[str, Any]]) -> None:
        """Write finished calls to the ledger in one transaction.

        Each row has key, engine, model, request, status and either response or
        error. A success overwrites an earlier failure; a success is never
        overwritten.
        """
        now = time.time()
        with self._tx():
            for r in rows:
                self.db.execute(
                    """INSERT INTO calls (key, engine, model, request, response, status, error,
                                          tokens_in, tokens_out, latency_s, attempts, created_at, updated_at)
                       VALUES (?,?,?,?,?,?,?,?,?,?,1,?,?)
                       ON CONFLICT(key) DO UPDATE SET
                         response=excluded.response, status=excluded.status, error=excluded.error,
                         tokens_in=excluded.tokens_in, tokens_out=excluded.tokens_out,
                         latency_s=excluded.latency_s, attempts=calls.attempts+1,
                         updated_at=excluded.updated_at
                       WHERE calls.status != 'ok'""",
                    (
                        r["key"],
                        r["engine"],
                        r["model"],
                        json.dumps(r["request"], ensure_ascii=False),
                        json.dumps(r["response"], ensure_ascii=False) if r.get("response") is not None else None,
                        r["status"],
                        r.get("error"),
                        int(r.get("tokens_in", 0)),
                        int(r.get("tokens_out", 0)),
                        float(r.get("latency_s", 0.0)),
                        now,
                        now,
                    ),
                )

    def call_counts(self) -> dict[str, int]:
        """Return the number of ledger rows by status."""
        return dict(self.db.execute("SELECT status, COUNT(*) FROM calls GROUP BY status").fetchall())

    # ---- artifacts --------------------------------------------------------------
    def put_prompts(self, set_name: str, prompts: Sequence[Prompt]) -> None:
        """Store ``prompts`` as the set ``set_name``, replacing what it held."""
        with self._tx():
            self.db.execute("DELETE FROM prompts WHERE set_name=?", (set_name,))
            self.db.executemany(
                "INSERT INTO prompts (set_name, id, pos, data) VALUES (?,?,?,?)",
                ((set_name, p.id, i, p.model_dump_json()) for i, p in enumerate(prompts)),
            )

    def get_prompts(self, set_name: str) -> list[Prompt]:
        rows = self.db.execute("SELECT data FROM prompts WHERE set_name=? ORDER BY pos", (set_name,))
        return [Prompt.model_validate_json(d) for (d,) in rows]

    def prompt_sets(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT set_name, COUNT(*) FROM prompts GROUP BY set_name").fetchall())

    def put_answers(self, answers: Iterable[Answer]) -> None:
        with self._tx():
            self.db.executemany(
                "INSERT OR REPLACE INTO answers (prompt_id, model, data) VALUES (?,?,?)",
                ((a.prompt_id, a.model, a.model_dump_json()) for a in answers),
            )

    def delete_answers(self, model: str, prompt_ids: Iterable[str]) -> None:
        """Drop ``model``'s answers to ``prompt_ids`` (answers that no longer hold, e.g. a turn failed)."""
        with self._tx():
            self.db.executemany("DELETE FROM answers WHERE model=? AND prompt_id=?", ((model, p) for p in prompt_ids))

    def get_answers(self, model: str | None = None) -> list[Answer]:
        if model is None:
            rows = self.db.execute("SELECT data FROM answers ORDER BY model, prompt_id")
        else:
            rows = self.db.execute("SELECT data FROM answers WHERE model=? ORDER BY prompt_id", (model,))
        return [Answer.model_validate_json(d) for (d,) in rows]

    def replace_judgments(self, judges: Iterable[str], judgments: Iterable[Judgment]) -> None:
        """Store ``judgments`` as all the judgments of ``judges``, dropping what they had before."""
        with self._tx():
            self.db.executemany("DELETE FROM judgments WHERE judge=?", ((j,) for j in judges))
            self.db.executemany(
                "INSERT OR REPLACE INTO judgments (prompt_id, model_a, model_b, judge, status, data) "
                "VALUES (?,?,?,?,?,?)",
                ((j.prompt_id, j.model_a, j.model_b, j.judge, j.status, j.model_dump_json()) for j in judgments),
            )

    def get_judgments(self, judge: str | None = None) -> list[Judgment]:
        sql, args = "SELECT data FROM judgments", ()
        if judge is not None:
            sql, args = sql + " WHERE judge=?", (judge,)
        return [Judgment.model_validate_json(d) for (d,) in self.db.execute(sql + " ORDER BY rowid", args)]

    def replace_battles(self, judge: str, battles: Iterable[Battle]) -> None:
        """Store ``battles`` as all the battles of ``judge``, dropping what it had before."""
        with self._tx():
            self.db.execute("DELETE FROM battles WHERE judge=?", (judge,))
            self.db.executemany(
                "INSERT OR REPLACE INTO battles (prompt_id, model_a, model_b, judge, data) VALUES (?,?,?,?,?)",
                ((b.prompt_id, b.model_a, b.model_b, b.judge, b.model_dump_json()) for b in battles),
            )

    def get_battles(self, judge: str | None = None) -> list[Battle]:
        sql, args = "SELECT data FROM battles", ()
        if judge is not None:
            sql, args = sql + " WHERE judge=?", (judge,)
        return [Battle.model_validate_json(d) for (d,) in self.db.execute(sql + " ORDER BY rowid", args)]

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx():
            self.db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?,?)", (key, json.dumps(value, ensure_ascii=False))
            )

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    # ---- helpers ----------------------------------------------------------------
    def _tx(self) -> _Transaction:
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, stripped line) of a JSONL file, skipping blank lines."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if line:
                yield lineno, line
