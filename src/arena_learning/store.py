"""The workspace: one directory with ``arena.db`` (SQLite in WAL mode).

It holds the ledger of every model call and the artifacts of every stage
(prompts, answers, judgments, battles), each as the JSON of its record so a
person can open the file with ``sqlite3`` and read it. Single-answer grades
(``grades``, imported MT-Bench judgments) are stored once, their texts
zlib-compressed beside the JSON; the pairwise games and battles they stand for
are derived when read, never stored.

The ledger is what makes runs resumable: a call is keyed by a hash of
(engine, model, params, messages); a success is stored once and never requested
again; a failure is recorded with its error and retried on the next run, never
used as an answer. Every success is committed as it arrives, so a process killed
at any moment loses nothing that had come back.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import sqlite3
import sys
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import combinations
from pathlib import Path
from typing import Any, ClassVar

from .errors import ArenaError
from .records import Answer, Battle, Grade, Judgment, Prompt, Vote

SCHEMA_VERSION = 4
"""Version of the tables below, kept in SQLite's ``user_version``. 0/1: release 0.1.0 (answers,
judgments and battles keyed without a set); 2: keyed by set, ledger rows record who asked;
3: single-answer grades stored once (``grades``; a version-2 workspace reads as one without);
4: ledger rows record their stage, batch flag and price (``CALL_COLUMNS``; older rows hold NULL); batch jobs and
the calls they hold (``batches``, ``batch_calls``; a version-3 workspace reads as one without)."""

DEFAULT_SET = "test"
"""The set a run's test prompts are stored as; answers, judgments and battles default to it."""

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
    updated_at REAL NOT NULL,
    requested_by TEXT,             -- the contestant or judge (config name) that first asked
    stage TEXT,                    -- the stage that asked (answers, battles, difficulty, ...)
    batch INTEGER DEFAULT 0,       -- 1: answered through a batch API (priced at the batch price)
    cost_usd REAL                  -- the call's price: its usage at the model's prices when it was made
);
CREATE TABLE IF NOT EXISTS prompts (
    set_name TEXT NOT NULL,
    id TEXT NOT NULL,
    pos INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (set_name, id)
);
CREATE TABLE IF NOT EXISTS answers (
    set_name TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    model TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (set_name, prompt_id, model)
);
CREATE TABLE IF NOT EXISTS judgments (
    set_name TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    model_a TEXT NOT NULL,
    model_b TEXT NOT NULL,
    judge TEXT NOT NULL,
    status TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (set_name, prompt_id, model_a, model_b, judge)
);
CREATE TABLE IF NOT EXISTS battles (
    set_name TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    model_a TEXT NOT NULL,
    model_b TEXT NOT NULL,
    judge TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (set_name, prompt_id, model_a, model_b, judge)
);
CREATE TABLE IF NOT EXISTS grades (
    set_name TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    model TEXT NOT NULL,
    judge TEXT NOT NULL,
    data TEXT NOT NULL,
    text BLOB NOT NULL,
    PRIMARY KEY (set_name, prompt_id, model, judge)
);
CREATE TABLE IF NOT EXISTS votes (
    vote_id TEXT PRIMARY KEY,       -- the item's nonce, made by the server when it showed the item: one vote per item
    set_name TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    model_a TEXT NOT NULL,          -- shown left ('' for a control's empty answer)
    model_b TEXT NOT NULL,          -- shown right
    verdict TEXT NOT NULL,          -- 'a', 'b', 'tie' or 'both_bad'
    voter TEXT NOT NULL,
    shown_at REAL NOT NULL,
    voted_at REAL NOT NULL,
    seconds REAL NOT NULL,
    control TEXT,                   -- NULL for a real item, else 'identical', 'empty' or 'repeat'
    retracted INTEGER NOT NULL DEFAULT 0,
    session INTEGER                 -- the voter's session it was cast in (NULL: cast before sessions)
);
CREATE TABLE IF NOT EXISTS voters (
    name TEXT PRIMARY KEY,          -- a voter's name, bound to the secret of the browser that took it
    secret TEXT NOT NULL,           -- sha256 of that secret (the browser holds it in a cookie)
    session INTEGER NOT NULL DEFAULT 0,  -- the session going on (the models of earlier ones were shown)
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,           -- deterministic: a hash of the model and its calls' ledger keys
    model TEXT NOT NULL,           -- the contestant or judge (config name) whose calls it holds
    endpoint TEXT NOT NULL,        -- where it went: a batch endpoint's URL, or 'file:' and an exported file
    file_id TEXT,                  -- the uploaded input file, once the upload returned
    batch_id TEXT,                 -- the batch job, once its creation returned
    status TEXT NOT NULL,          -- 'open' until its results are in the ledger, then the job's last status
    counts TEXT,                   -- the job's request counts (JSON)
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS batch_calls (
    batch TEXT NOT NULL,           -- batches.id
    key TEXT NOT NULL,             -- the call's ledger key (the line's custom_id)
    call TEXT NOT NULL,            -- what its ledger row needs (JSON): engine, model, request, how to read a reply
    PRIMARY KEY (batch, key)
);
"""

VOTE_TABLES = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS votes"):SCHEMA.index("CREATE TABLE IF NOT EXISTS meta")]
VOTE_COLUMNS = ("vote_id", "set_name", "prompt_id", "model_a", "model_b", "verdict", "voter", "shown_at", "voted_at",
                "seconds", "control", "retracted", "session")
"""The votes table's columns; ``session`` and the ``voters`` table came later: a workspace without them gains
them when opened to write (``Store._vote_tables``), and reads its votes as cast before sessions."""

# Release 0.1.0 -> 2: the three artifact tables gain a leading set_name (its rows were the test
# set's); SQLite cannot change a primary key in place, so each table is rebuilt.
MIGRATE_1_TO_2 = """
ALTER TABLE answers RENAME TO answers_v1;
ALTER TABLE judgments RENAME TO judgments_v1;
ALTER TABLE battles RENAME TO battles_v1;
{schema}
INSERT INTO answers (set_name, prompt_id, model, data) SELECT 'test', prompt_id, model, data FROM answers_v1;
INSERT INTO judgments (set_name, prompt_id, model_a, model_b, judge, status, data)
    SELECT 'test', prompt_id, model_a, model_b, judge, status, data FROM judgments_v1;
INSERT INTO battles (set_name, prompt_id, model_a, model_b, judge, data)
    SELECT 'test', prompt_id, model_a, model_b, judge, data FROM battles_v1;
DROP TABLE answers_v1;
DROP TABLE judgments_v1;
DROP TABLE battles_v1;
ALTER TABLE calls ADD COLUMN requested_by TEXT;
"""


CALL_COLUMNS = {"stage": "TEXT", "batch": "INTEGER DEFAULT 0", "cost_usd": "REAL"}
"""Ledger columns added in schema 4: a version 1-3 workspace gains them (ALTER TABLE) when opened to write."""


def grade_games(grades: Iterable[Grade]) -> list[Judgment]:
    """Return the pairwise games that single grades stand for (MT-Bench): per (prompt, judge), one game per pair
    of models graded, in name order, the higher grade winning and equal grades a tie.

    A failed grade (score None) makes its games failed games that still carry the other model's grade. The
    games reference the grades: their ``raw`` is empty, the texts stay with the grades (``Store.get_grades``).
    """
    by_prompt: dict[tuple[str, str], dict[str, float | None]] = defaultdict(dict)
    for g in grades:
        by_prompt[(g.prompt_id, g.judge)][g.model] = g.score
    out = []
    for (pid, judge), by_model in by_prompt.items():
        for a, b in combinations(sorted(by_model), 2):
            sa, sb = by_model[a], by_model[b]
            if sa is None or sb is None:
                lost = " and ".join(m for m, x in ((a, sa), (b, sb)) if x is None)
                out.append(Judgment(prompt_id=pid, model_a=a, model_b=b, judge=judge, status="failed",
                                    scores_a=[] if sa is None else [sa], scores_b=[] if sb is None else [sb],
                                    explanation=f"the grading of {lost} failed (FastChat score -1 or null)"))
                continue
            outcome = "tie" if sa == sb else ("model_a" if sa > sb else "model_b")
            out.append(Judgment(prompt_id=pid, model_a=a, model_b=b, judge=judge, scores_a=[sa], scores_b=[sb],
                                score_a=sa, score_b=sb, verdict=outcome))
    return out


def grade_battles(grades: Iterable[Grade]) -> list[Battle]:
    """Return the battles of ``grade_games``: one per game that did not fail (a battle of one game)."""
    return [Battle(prompt_id=j.prompt_id, model_a=j.model_a, model_b=j.model_b, outcome=j.verdict or "tie",
                   score_a=j.score_a, score_b=j.score_b, score_gap=abs((j.score_a or 0.0) - (j.score_b or 0.0)),
                   judge=j.judge, games=1)
            for j in grade_games(grades) if j.status == "ok"]


def canonical_json(value: Any) -> str:
    """Return ``value`` as the ledger's canonical JSON: sorted keys, no spaces, text as it is (not escaped)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def call_key(engine: str, model: str, params: dict[str, Any], payload: Any) -> str:
    """Return the ledger key of a call: sha256 over its canonical JSON."""
    return call_key_json(engine, model, canonical_json(params), canonical_json(payload))


def call_key_json(engine: str, model: str, params_json: str, payload_json: str) -> str:
    """Return ``call_key`` from the canonical JSON of ``params`` and ``payload``, encoded once by the caller.

    The canonical JSON of the dict {engine, model, params, payload} is its four members' canonical JSON in
    sorted key order, so the blob is assembled from the parts byte for byte as ``canonical_json`` would write
    the whole (tests/test_store.py pins it): a call's payload, its largest part, is encoded once for its key,
    its request body and its ledger row.
    """
    blob = f'{_key_head(engine, model)}"params":{params_json},"payload":{payload_json}}}'
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@lru_cache(maxsize=256)
def _key_head(engine: str, model: str) -> str:
    """Return the start of a key's blob, the same for every call of one model: encoded once."""
    return f'{{"engine":{canonical_json(engine)},"model":{canonical_json(model)},'


@dataclass(frozen=True)
class CallRecord:
    """A ledger row as the caller sees it."""

    key: str
    status: str
    response_json: str | None  # the response as the ledger holds it (JSON text); ``response`` decodes it
    error: str | None
    attempts: int

    @cached_property
    def response(self) -> dict[str, Any] | None:
        """Return the response, decoded on first use (the ledger road validates ``response_json`` directly)."""
        return json.loads(self.response_json) if self.response_json else None


@dataclass(frozen=True)
class BatchRecord:
    """A batch job as the workspace records it: its calls are in ``batch_calls`` (``Store.batch_calls``)."""

    id: str  # deterministic: the same calls of the same model make the same id
    model: str  # the contestant or judge (config name) whose calls it holds
    endpoint: str  # the batch endpoint's URL, or 'file:' and the path of an exported file
    file_id: str | None
    batch_id: str | None
    status: str  # 'open' until its results are in the ledger, then the job's last status
    counts: dict[str, int]
    created_at: float
    calls: int


class WorkspaceLocked(ArenaError):
    """Another process writes to this workspace."""


class _WriterLock:
    """An exclusive ``flock`` on ``WORKSPACE/arena.lock`` held while a Store may write.

    The kernel drops it when the holder exits, however it dies (``kill -9`` included), so a
    killed run never leaves a stale lock. The file names the holder (pid, host, command, start)
    for the message another writer gets. Stores of one process share the lock (counted).
    """

    _held: ClassVar[dict[str, list]] = {}  # real path -> [fd, count]
    _guard = threading.Lock()

    def __init__(self, root: Path):
        self.path = str((root / "arena.lock").resolve())
        with self._guard:
            entry = self._held.get(self.path)
            if entry is not None:
                entry[1] += 1
                return
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise WorkspaceLocked(
                    f"{root} is in use by {holder}: one writer at a time. Wait for it to finish (or stop it), "
                    "then run again; read-only commands (leaderboard, report, compare) work meanwhile"
                ) from None
            os.ftruncate(fd, 0)
            command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:300]
            started = time.strftime("%Y-%m-%d %H:%M:%S")
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} ({command!r}, since {started})\n".encode())
            self._held[self.path] = [fd, 1]

    def release(self) -> None:
        with self._guard:
            entry = self._held.get(self.path)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                fd = entry[0]
                del self._held[self.path]
                try:
                    os.ftruncate(fd, 0)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)


class Store:
    """A workspace directory and its SQLite database.

    ``readonly=True`` opens an existing workspace for reading only: it never creates a file and
    takes no lock (a missing workspace is an error). Otherwise the store creates the workspace
    if needed (``create=False``: a missing workspace is an error), migrates an older one, and
    holds the writer lock until closed.
    """

    FILE = "arena.db"

    def __init__(self, workspace: str | Path, *, readonly: bool = False, create: bool = True):
        self.root = Path(workspace)
        self.path = self.root / self.FILE
        self.readonly = readonly
        self._lock: _WriterLock | None = None
        if (readonly or not create) and not self.path.is_file():
            raise ArenaError(f"{self.root} is not a workspace (no {self.FILE}): give the directory a run or an "
                             f"import wrote to")
        if readonly:
            try:
                self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                          check_same_thread=False)
                self.db.execute("PRAGMA busy_timeout=30000")
                version = self.db.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.Error as err:
                raise ArenaError(f"cannot read the workspace {self.root} ({err})") from None
            self._check_version(version)
            if version < 2 and self._has_table("answers"):  # version 2 reads as it is (no grades)
                self.db.close()
                raise ArenaError(f"{self.root} was written by an older release (schema {version}, this one reads "
                                 f"{SCHEMA_VERSION}): open it once with a writing command (e.g. `arena run`) to "
                                 f"migrate it")
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock = _WriterLock(self.root)
            # isolation_level=None: we open transactions ourselves, so a batch is one commit.
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as err:
            self._release()
            raise ArenaError(f"cannot use {self.root} as a workspace ({err}): give a directory you can "
                             f"write to") from None
        self.db.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable against a killed process (not a power cut) and far faster than FULL.
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        try:
            self._migrate()
        except ArenaError:
            self.close()
            raise

    @classmethod
    def exists(cls, workspace: str | Path) -> bool:
        """Return whether ``workspace`` holds a workspace (a store to open), without opening it."""
        return (Path(workspace) / cls.FILE).is_file()

    def _has_table(self, name: str) -> bool:
        row = self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
        return row is not None

    def _call_columns(self) -> set[str]:
        return {r[1] for r in self.db.execute("PRAGMA table_info(calls)")}

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            self.db.close()
            raise ArenaError(
                f"{self.root} was written by a newer release of arena-learning (workspace schema {version}, this "
                f"release knows up to {SCHEMA_VERSION}): upgrade (`pip install -U arena-learning`) or use another "
                f"workspace"
            )

    def _migrate(self) -> None:
        """Create the tables, or bring an older workspace's to this schema (in one transaction)."""
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        self._check_version(version)
        if version == SCHEMA_VERSION:
            self._vote_tables()
            return
        old = self._has_table("answers") and "set_name" not in {
            r[1] for r in self.db.execute("PRAGMA table_info(answers)")}
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if old:
                # statement by statement: executescript would commit halfway
                for stmt in MIGRATE_1_TO_2.format(schema=SCHEMA).split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
            else:
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
            have = self._call_columns()
            for column, decl in CALL_COLUMNS.items():
                if column not in have:  # the column names and types are the literals above
                    self.db.execute(f"ALTER TABLE calls ADD COLUMN {column} {decl}")
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.db.execute("COMMIT")
        except sqlite3.Error as err:
            self.db.execute("ROLLBACK")
            raise ArenaError(f"cannot migrate the workspace {self.root} to schema {SCHEMA_VERSION} ({err}); "
                             "it is unchanged") from None
        self._vote_tables()

    def _vote_tables(self) -> None:
        """Give a workspace made before the vote page, or before voter sessions, what the votes need; no data moves."""
        if self._has_table("votes") and "session" not in self._vote_columns():
            self.db.execute("ALTER TABLE votes ADD COLUMN session INTEGER")
        if not (self._has_table("votes") and self._has_table("voters")):
            with self._tx():
                for stmt in VOTE_TABLES.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)

    def _vote_columns(self) -> set[str]:
        return {r[1] for r in self.db.execute("PRAGMA table_info(votes)")}

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            self._release()

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
                found[key] = CallRecord(key, status, response or None, error, attempts)
        return found

    def output_history(self, model: str, requested_by: str) -> tuple[int, float | None]:
        """Return how many successful calls ``requested_by`` made to ``model`` (a ledger model id) and the mean
        tokens they wrote (``arena plan``'s expected output length)."""
        n, mean = self.db.execute(
            "SELECT COUNT(*), AVG(tokens_out) FROM calls WHERE model = ? AND requested_by = ? AND status = 'ok'",
            (model, requested_by),
        ).fetchone()
        return int(n), (float(mean) if mean is not None else None)

    def record_calls(self, rows: Iterable[dict[str, Any]]) -> None:
        """Write finished calls to the ledger in one transaction.

        Each row has key, engine, model, request, status and either response or
        error; ``request_json`` / ``response_json`` may stand for ``request`` /
        ``response`` when the caller holds them encoded already (the ledger road
        encodes a payload once). A success overwrites an earlier failure; a
        success is never overwritten.
        """
        now = time.time()

        def values(r: dict[str, Any]) -> tuple:
            request = r.get("request_json") or json.dumps(r["request"], ensure_ascii=False)
            response = r.get("response_json")
            if response is None and r.get("response") is not None:
                response = json.dumps(r["response"], ensure_ascii=False)
            return (r["key"], r["engine"], r["model"], request, response, r["status"], r.get("error"),
                    int(r.get("tokens_in", 0)), int(r.get("tokens_out", 0)), float(r.get("latency_s", 0.0)),
                    now, now, r.get("requested_by"), r.get("stage"), int(bool(r.get("batch", False))),
                    r.get("cost_usd"))

        with self._tx():
            # one executemany: the rows of a commit are the many results of one flush
            self.db.executemany(
                """INSERT INTO calls (key, engine, model, request, response, status, error,
                                      tokens_in, tokens_out, latency_s, attempts, created_at, updated_at,
                                      requested_by, stage, batch, cost_usd)
                   VALUES (?,?,?,?,?,?,?,?,?,?,1,?,?,?,?,?,?)
                   ON CONFLICT(key) DO UPDATE SET
                     response=excluded.response, status=excluded.status, error=excluded.error,
                     tokens_in=excluded.tokens_in, tokens_out=excluded.tokens_out,
                     latency_s=excluded.latency_s, attempts=calls.attempts+1, stage=excluded.stage,
                     batch=excluded.batch, cost_usd=excluded.cost_usd,
                     updated_at=excluded.updated_at
                   WHERE calls.status != 'ok'""",
                [values(r) for r in rows],
            )

    def demote_calls(self, rows: Iterable[tuple[str, str]]) -> None:
        """Turn the ledger successes of (error, key) ``rows`` into failures with that error, in one transaction.

        The store never overwrites a success (that is what makes a finished call final); a success
        that holds no answer (empty text, written before empty completions counted as failures)
        is demoted so that a new success can replace it.
        """
        with self._tx():
            self.db.executemany("UPDATE calls SET status='error', error=? WHERE key=? AND status='ok'", rows)

    def spent_usd(self) -> float:
        """Return what the ledger's successful calls cost, every run together (rows without a price count 0)."""
        if "cost_usd" not in self._call_columns():  # a version 1-3 workspace opened read-only
            return 0.0
        return float(self.db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM calls WHERE status='ok'").fetchone()[0])

    def spend_rows(self) -> list[dict[str, Any]]:
        """Return the ledger's successful calls summed per (who asked, stage, batch): calls, tokens in and out,
        USD (None where no row of the group has a price: calls recorded before schema 4)."""
        have = self._call_columns()
        stage = "stage" if "stage" in have else "NULL"  # a version 1-3 workspace opened read-only
        batch = "COALESCE(batch, 0)" if "batch" in have else "0"
        usd = "SUM(cost_usd)" if "cost_usd" in have else "NULL"
        rows = self.db.execute(  # the column expressions are the literals above
            f"SELECT COALESCE(requested_by, '?'), {stage}, {batch}, COUNT(*), SUM(tokens_in), SUM(tokens_out), {usd} "
            f"FROM calls WHERE status='ok' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
        return [{"model": who, "stage": st, "batch": bool(b), "calls": n, "tokens_in": int(tin or 0),
                 "tokens_out": int(tout or 0), "usd": cost} for who, st, b, n, tin, tout, cost in rows]

    def call_counts(self) -> dict[str, int]:
        """Return the number of ledger rows by status."""
        return dict(self.db.execute("SELECT status, COUNT(*) FROM calls GROUP BY status").fetchall())

    # ---- batch jobs -------------------------------------------------------------
    def add_batch(self, batch: str, model: str, endpoint: str, calls: Iterable[tuple[str, str]]) -> None:
        """Record the batch ``batch`` (open) and its (ledger key, call JSON) ``calls``, in one transaction.

        Written before anything is uploaded, so a run killed at any later moment finds the batch again. A batch
        recorded already keeps its row (and ids); its calls are added to.
        """
        now = time.time()
        with self._tx():
            self.db.execute(
                "INSERT INTO batches (id, model, endpoint, status, created_at, updated_at) VALUES (?,?,?,'open',?,?) "
                "ON CONFLICT(id) DO NOTHING", (batch, model, endpoint, now, now))
            self.db.executemany("INSERT OR IGNORE INTO batch_calls (batch, key, call) VALUES (?,?,?)",
                                ((batch, k, c) for k, c in calls))

    def update_batch(self, batch: str, *, file_id: str | None = None, batch_id: str | None = None,
                     status: str | None = None, counts: dict[str, int] | None = None) -> None:
        """Set what is given of ``batch``'s input file, job id, status and request counts."""
        sets = {"file_id": file_id, "batch_id": batch_id, "status": status,
                "counts": None if counts is None else json.dumps(counts)}
        given = {k: v for k, v in sets.items() if v is not None}
        if not given:
            return
        with self._tx():
            # the column names are the literals above, never user text
            self.db.execute(f"UPDATE batches SET {', '.join(f'{k}=?' for k in given)}, updated_at=? WHERE id=?",
                            (*given.values(), time.time(), batch))

    def get_batches(self, status: str | None = None, endpoint_prefix: str = "") -> list[BatchRecord]:
        """Return the batches recorded here (with ``status``; whose endpoint starts with ``endpoint_prefix``), oldest
        first."""
        if not self._has_table("batches"):  # a version-3 workspace opened read-only
            return []
        sql = ("SELECT b.id, b.model, b.endpoint, b.file_id, b.batch_id, b.status, b.counts, b.created_at, "
               "(SELECT COUNT(*) FROM batch_calls c WHERE c.batch = b.id) FROM batches b "
               "WHERE substr(b.endpoint, 1, ?) = ?")
        args: list[Any] = [len(endpoint_prefix), endpoint_prefix]
        if status is not None:
            sql, args = sql + " AND b.status = ?", [*args, status]
        rows = self.db.execute(sql + " ORDER BY b.created_at, b.rowid", args)
        return [BatchRecord(i, m, e, f, b, s, json.loads(c) if c else {}, t, n) for i, m, e, f, b, s, c, t, n in rows]

    def batch_calls(self, batch: str) -> dict[str, str]:
        """Return the calls of ``batch``: ledger key -> call JSON, in the order recorded."""
        rows = self.db.execute("SELECT key, call FROM batch_calls WHERE batch=? ORDER BY rowid", (batch,))
        return dict(rows.fetchall())

    def find_batch_calls(self, keys: Sequence[str], endpoint_prefix: str = "") -> dict[str, str]:
        """Return ledger key -> call JSON for the ``keys`` that a batch recorded here holds (the latest batch's)."""
        if not self._has_table("batch_calls"):
            return {}
        found: dict[str, str] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start: start + 500])
            rows = self.db.execute(
                f"SELECT c.key, c.call FROM batch_calls c JOIN batches b ON b.id = c.batch "
                f"WHERE c.key IN ({','.join('?' * len(chunk))}) AND substr(b.endpoint, 1, ?) = ? "
                f"ORDER BY b.created_at, c.rowid", [*chunk, len(endpoint_prefix), endpoint_prefix])
            found.update(rows.fetchall())
        return found

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

    def put_answers(self, answers: Iterable[Answer], set_name: str = DEFAULT_SET) -> None:
        """Store answers to prompts of ``set_name`` (replacing a model's earlier answer to the same prompt)."""
        with self._tx():
            self.db.executemany(
                "INSERT OR REPLACE INTO answers (set_name, prompt_id, model, data) VALUES (?,?,?,?)",
                ((set_name, a.prompt_id, a.model, a.model_dump_json()) for a in answers),
            )

    def delete_answers(self, model: str, prompt_ids: Iterable[str], set_name: str = DEFAULT_SET) -> None:
        """Drop ``model``'s answers to ``prompt_ids`` (answers that no longer hold, e.g. a turn failed)."""
        with self._tx():
            self.db.executemany("DELETE FROM answers WHERE set_name=? AND model=? AND prompt_id=?",
                                ((set_name, model, p) for p in prompt_ids))

    def get_answers(self, model: str | None = None, set_name: str = DEFAULT_SET) -> list[Answer]:
        """Return the answers to prompts of ``set_name`` (of ``model``, or of every model)."""
        if model is None:
            rows = self.db.execute("SELECT data FROM answers WHERE set_name=? ORDER BY model, prompt_id", (set_name,))
        else:
            rows = self.db.execute("SELECT data FROM answers WHERE set_name=? AND model=? ORDER BY prompt_id",
                                   (set_name, model))
        return [Answer.model_validate_json(d) for (d,) in rows]

    def answer_sets(self) -> dict[str, int]:
        """Return the number of answers held per set."""
        return dict(self.db.execute("SELECT set_name, COUNT(*) FROM answers GROUP BY set_name").fetchall())

    def replace_judgments(self, judges: Iterable[str], judgments: Iterable[Judgment],
                          set_name: str = DEFAULT_SET) -> None:
        """Store ``judgments`` as all the judgments of ``judges`` on ``set_name``, dropping what they had there."""
        with self._tx():
            self.db.executemany("DELETE FROM judgments WHERE set_name=? AND judge=?", ((set_name, j) for j in judges))
            self.db.executemany(
                "INSERT OR REPLACE INTO judgments (set_name, prompt_id, model_a, model_b, judge, status, data) "
                "VALUES (?,?,?,?,?,?,?)",
                ((set_name, j.prompt_id, j.model_a, j.model_b, j.judge, j.status, j.model_dump_json())
                 for j in judgments),
            )

    def get_judgments(self, judge: str | None = None, set_name: str = DEFAULT_SET) -> list[Judgment]:
        """Return the judgments of ``set_name`` (of ``judge``): those stored, then the games of stored grades."""
        sql, args = "SELECT data FROM judgments WHERE set_name=?", [set_name]
        if judge is not None:
            sql, args = sql + " AND judge=?", [set_name, judge]
        stored = [Judgment.model_validate_json(d) for (d,) in self.db.execute(sql + " ORDER BY rowid", args)]
        return stored + grade_games(self.get_grades(judge, set_name))

    def judgment_judges(self) -> list[str]:
        """Return the names of the judges with judgments (or grades) here (any set), sorted."""
        stored = {r[0] for r in self.db.execute("SELECT DISTINCT judge FROM judgments")}
        return sorted(stored | set(self.grade_judges()))

    def replace_grades(self, judge: str, grades: Iterable[Grade], set_name: str = DEFAULT_SET) -> None:
        """Store ``grades`` as all that ``judge`` has on ``set_name``: its grades, judgments and battles there go.

        The judge's pairwise games and battles are derived from the grades when read (``get_judgments``,
        ``get_battles``): each grade and its text is stored once.
        """
        with self._tx():
            for table in ("grades", "judgments", "battles"):
                # the table names are the literals above, never user text
                self.db.execute(f"DELETE FROM {table} WHERE set_name=? AND judge=?", (set_name, judge))
            # the text apart and zlib-compressed: judgment texts of ~2 KB would fill half a page each
            self.db.executemany(
                "INSERT OR REPLACE INTO grades (set_name, prompt_id, model, judge, data, text) VALUES (?,?,?,?,?,?)",
                ((set_name, g.prompt_id, g.model, judge, g.model_dump_json(exclude={"text"}),
                  zlib.compress(g.text.encode("utf-8"))) for g in grades if g.judge == judge),
            )

    def get_grades(self, judge: str | None = None, set_name: str = DEFAULT_SET) -> list[Grade]:
        """Return the single-answer grades of ``set_name`` (of ``judge``), in the order stored."""
        if not self._has_table("grades"):  # a version-2 workspace opened read-only
            return []
        sql, args = "SELECT data, text FROM grades WHERE set_name=?", [set_name]
        if judge is not None:
            sql, args = sql + " AND judge=?", [set_name, judge]
        out = []
        for data, text in self.db.execute(sql + " ORDER BY rowid", args):
            grade = Grade.model_validate_json(data)
            grade.text = zlib.decompress(text).decode("utf-8")
            out.append(grade)
        return out

    def grade_judges(self) -> list[str]:
        """Return the judges with single-answer grades stored here (any set), sorted."""
        if not self._has_table("grades"):
            return []
        return [r[0] for r in self.db.execute("SELECT DISTINCT judge FROM grades ORDER BY judge")]

    def replace_battles(self, judge: str, battles: Iterable[Battle], set_name: str = DEFAULT_SET) -> None:
        """Store ``battles`` as all the battles of ``judge`` on ``set_name``, dropping what it had there."""
        with self._tx():
            self.db.execute("DELETE FROM battles WHERE set_name=? AND judge=?", (set_name, judge))
            self.db.executemany(
                "INSERT OR REPLACE INTO battles (set_name, prompt_id, model_a, model_b, judge, data) "
                "VALUES (?,?,?,?,?,?)",
                ((set_name, b.prompt_id, b.model_a, b.model_b, b.judge, b.model_dump_json()) for b in battles),
            )

    def get_battles(self, judge: str | None = None, set_name: str = DEFAULT_SET) -> list[Battle]:
        """Return the battles of ``set_name`` (of ``judge``): those stored, then the battles of stored grades."""
        sql, args = "SELECT data FROM battles WHERE set_name=?", [set_name]
        if judge is not None:
            sql, args = sql + " AND judge=?", [set_name, judge]
        stored = [Battle.model_validate_json(d) for (d,) in self.db.execute(sql + " ORDER BY rowid", args)]
        return stored + grade_battles(self.get_grades(judge, set_name))

    # ---- people's votes -------------------------------------------------------------
    def record_vote(self, vote: Vote) -> bool:
        """Store ``vote`` at once (its own commit); return False when its ``vote_id`` (its item) is already used."""
        with self._tx():
            cur = self.db.execute(
                f"INSERT OR IGNORE INTO votes ({', '.join(VOTE_COLUMNS)}) VALUES ({','.join('?' * len(VOTE_COLUMNS))})",
                tuple(getattr(vote, c) for c in VOTE_COLUMNS))
        return cur.rowcount == 1

    def retract_vote(self, vote_id: str, voter: str) -> bool:
        """Mark ``voter``'s vote ``vote_id`` retracted (undo); return whether one was."""
        with self._tx():
            cur = self.db.execute("UPDATE votes SET retracted=1 WHERE vote_id=? AND voter=? AND retracted=0",
                                  (vote_id, voter))
        return cur.rowcount == 1

    def get_votes(self, set_name: str | None = None, *, retracted: bool = False) -> list[Vote]:
        """Return the votes (of ``set_name``), in the order cast; retracted ones only when asked."""
        if not self._has_table("votes"):  # a workspace made before the vote page, opened read-only
            return []
        have = self._vote_columns()
        columns = ", ".join(c if c in have else f"NULL AS {c}" for c in VOTE_COLUMNS)  # the names are the literals
        args: list[object] = [int(retracted)]
        sql = f"SELECT {columns} FROM votes WHERE (retracted=0 OR ?)"
        if set_name is not None:
            sql, args = sql + " AND set_name=?", [*args, set_name]
        rows = self.db.execute(sql + " ORDER BY voted_at, rowid", args)
        return [Vote(**dict(zip(VOTE_COLUMNS, r))) for r in rows]

    def bind_voter(self, name: str, secret_digest: str, *, replace: bool = False) -> bool:
        """Bind the voter ``name`` to a secret (its sha256); return False when the name is bound already and not
        ``replace`` (an invitation replaces the secret and keeps the session)."""
        with self._tx():
            if replace:
                cur = self.db.execute(
                    "INSERT INTO voters (name, secret, created_at) VALUES (?,?,?) "
                    "ON CONFLICT(name) DO UPDATE SET secret=excluded.secret", (name, secret_digest, time.time()))
            else:
                cur = self.db.execute("INSERT OR IGNORE INTO voters (name, secret, created_at) VALUES (?,?,?)",
                                      (name, secret_digest, time.time()))
        return cur.rowcount == 1

    def get_voter(self, name: str) -> tuple[str, int] | None:
        """Return the voter's secret digest and session going on, None when the name is not bound."""
        if not self._has_table("voters"):
            return None
        row = self.db.execute("SELECT secret, session FROM voters WHERE name=?", (name,)).fetchone()
        return (row[0], int(row[1])) if row else None

    def end_session(self, name: str, session: int) -> bool:
        """End the voter's session ``session`` (the next begins); return False when it had ended already."""
        with self._tx():
            cur = self.db.execute("UPDATE voters SET session=session+1 WHERE name=? AND session=?", (name, session))
        return cur.rowcount == 1

    # ---- what a workspace holds ----------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Return what the workspace holds: schema, sets, answers per set, models' ledger identities, calls."""
        identities: dict[str, set[str]] = {}
        for who, model, engine in self.db.execute(
                "SELECT DISTINCT COALESCE(requested_by, '?'), model, engine FROM calls"):
            identities.setdefault(who, set()).add(f"{engine}:{model}")
        lock = self.root / "arena.lock"
        holder = lock.read_text(encoding="utf-8", errors="replace").strip() if lock.is_file() else ""
        return {
            "workspace": str(self.root),
            "schema_version": self.db.execute("PRAGMA user_version").fetchone()[0],
            "prompt_sets": self.prompt_sets(),
            "answers_per_set": self.answer_sets(),
            "judges": self._battle_counts(),
            "calls": self.call_counts(),
            "models": {who: sorted(ids) for who, ids in sorted(identities.items())},
            "writer": holder or None,
            "bytes": self._size(),
        }

    def _battle_counts(self) -> dict[str, int]:
        """Return the number of battles per judge, stored or derived from grades (every set)."""
        counts = dict(self.db.execute("SELECT judge, COUNT(*) FROM battles GROUP BY judge").fetchall())
        for judge in self.grade_judges():
            sets = [r[0] for r in self.db.execute("SELECT DISTINCT set_name FROM grades WHERE judge=?", (judge,))]
            counts[judge] = counts.get(judge, 0) + sum(len(grade_battles(self.get_grades(judge, s))) for s in sets)
        return counts

    # ---- forgetting and cleaning --------------------------------------------------
    def model_names(self) -> set[str]:
        """Return every model name that has answers, battles, grades or ledger calls here."""
        rows = self.db.execute(
            "SELECT model FROM answers UNION SELECT model_a FROM battles UNION SELECT model_b FROM battles "
            "UNION SELECT requested_by FROM calls WHERE requested_by IS NOT NULL")
        graded = self.db.execute("SELECT DISTINCT model FROM grades") if self._has_table("grades") else []
        return {r[0] for r in rows} | {r[0] for r in graded}

    def forget_model(self, name: str) -> dict[str, int]:
        """Drop a model's answers, the judgments, battles and people's votes it took part in, and the ledger calls
        it made.

        Ledger rows are found by who asked (``requested_by``); rows of a workspace made before
        that column existed are not attributable and stay (counted under ``ledger_unattributed``).
        """
        counts: dict[str, int] = {}
        with self._tx():
            counts["answers"] = self.db.execute("DELETE FROM answers WHERE model=?", (name,)).rowcount
            counts["judgments"] = self.db.execute(
                "DELETE FROM judgments WHERE model_a=? OR model_b=?", (name, name)).rowcount
            counts["battles"] = self.db.execute(
                "DELETE FROM battles WHERE model_a=? OR model_b=?", (name, name)).rowcount
            counts["grades"] = self.db.execute("DELETE FROM grades WHERE model=?", (name,)).rowcount
            # people's votes were on its answers, which go: a model retrained under the name is voted on anew
            counts["votes"] = self.db.execute(
                "DELETE FROM votes WHERE model_a=? OR model_b=?", (name, name)).rowcount
            counts["ledger"] = self.db.execute("DELETE FROM calls WHERE requested_by=?", (name,)).rowcount
            counts["ledger_unattributed"] = self.db.execute(
                "SELECT COUNT(*) FROM calls WHERE requested_by IS NULL").fetchone()[0]
        return counts

    def vacuum(self) -> dict[str, int]:
        """Drop superseded rows and give their space back; return what was dropped and the file sizes.

        Superseded: answers, judgments and battles of prompts no longer in their set (a test set
        rebuilt smaller, a set removed), and failed ledger calls (never used as answers; a rerun
        asks again anyway). Successful calls are kept: they are what a rerun is served from.
        """
        before = self._size()
        counts: dict[str, int] = {}
        with self._tx():
            for table in ("answers", "judgments", "battles"):
                counts[table] = self.db.execute(
                    f"DELETE FROM {table} WHERE NOT EXISTS (SELECT 1 FROM prompts p "  # table: one of three fixed names
                    f"WHERE p.set_name={table}.set_name AND p.id={table}.prompt_id)").rowcount
            counts["failed_calls"] = self.db.execute("DELETE FROM calls WHERE status != 'ok'").rowcount
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.execute("VACUUM")
        counts["bytes_before"], counts["bytes_after"] = before, self._size()
        return counts

    def _size(self) -> int:
        return sum(p.stat().st_size for p in (self.path, self.path.with_name("arena.db-wal")) if p.exists())

    def copy_to(self, path: str | Path) -> None:
        """Write a consistent copy of the workspace's database to ``path`` (SQLite's online backup)."""
        dest = sqlite3.connect(path)
        try:
            self.db.backup(dest)
        finally:
            dest.close()

    def set_meta(self, key: str, value: Any) -> None:
        with self._tx():
            self.db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?,?)", (key, json.dumps(value, ensure_ascii=False))
            )

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def meta_items(self, prefix: str) -> list[tuple[str, Any]]:
        """Return (key, value) of every meta entry whose key starts with ``prefix`` (case-sensitive), by key."""
        rows = self.db.execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ? ORDER BY key",
                               (len(prefix), prefix))
        return [(k, json.loads(v)) for k, v in rows]

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
