"""The workspace: answers keyed by set, schema version and migration, read-only reads, one writer, forget, vacuum."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from arena_learning import pipeline
from arena_learning.config import RunConfig
from arena_learning.errors import ArenaError
from arena_learning.records import Answer, Battle, Judgment, Prompt
from arena_learning.store import SCHEMA_VERSION, Store, WorkspaceLocked

from .conftest import ARENA

# What release 0.1.0 wrote (its SCHEMA, verbatim for the tables that changed), and a row in each.
RELEASE_0_1_0 = """
CREATE TABLE calls (key TEXT PRIMARY KEY, engine TEXT NOT NULL, model TEXT NOT NULL, request TEXT NOT NULL,
    response TEXT, status TEXT NOT NULL, error TEXT, tokens_in INTEGER DEFAULT 0, tokens_out INTEGER DEFAULT 0,
    latency_s REAL DEFAULT 0, attempts INTEGER DEFAULT 1, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE prompts (set_name TEXT NOT NULL, id TEXT NOT NULL, pos INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (set_name, id));
CREATE TABLE answers (prompt_id TEXT NOT NULL, model TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (prompt_id, model));
CREATE TABLE judgments (prompt_id TEXT NOT NULL, model_a TEXT NOT NULL, model_b TEXT NOT NULL, judge TEXT NOT NULL,
    status TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (prompt_id, model_a, model_b, judge));
CREATE TABLE battles (prompt_id TEXT NOT NULL, model_a TEXT NOT NULL, model_b TEXT NOT NULL, judge TEXT NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (prompt_id, model_a, model_b, judge));
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def old_workspace(root):
    root.mkdir(parents=True)
    db = sqlite3.connect(root / "arena.db")
    db.executescript(RELEASE_0_1_0)
    p = Prompt(id="p1", turns=["hi"])
    a = Answer(prompt_id="p1", model="m", turns=["hello"], tokens_in=3, tokens_out=2)
    j = Judgment(prompt_id="p1", model_a="m", model_b="n", judge="v", score_a=1, score_b=0, verdict="model_a")
    b = Battle(prompt_id="p1", model_a="m", model_b="n", outcome="model_a", judge="v")
    db.execute("INSERT INTO prompts VALUES ('test','p1',0,?)", (p.model_dump_json(),))
    db.execute("INSERT INTO answers VALUES ('p1','m',?)", (a.model_dump_json(),))
    db.execute("INSERT INTO judgments VALUES ('p1','m','n','v','ok',?)", (j.model_dump_json(),))
    db.execute("INSERT INTO battles VALUES ('p1','m','n','v',?)", (b.model_dump_json(),))
    db.execute("INSERT INTO calls (key, engine, model, request, status, created_at, updated_at) "
               "VALUES ('k','openai','x','{}','ok',0,0)")
    db.commit()
    db.close()
    return a, j, b


def test_a_release_0_1_0_workspace_is_migrated_with_its_results(tmp_path):
    a, j, b = old_workspace(tmp_path / "ws")
    with pytest.raises(ArenaError, match="older release"):
        Store(tmp_path / "ws", readonly=True)
    with Store(tmp_path / "ws") as s:
        assert s.get_answers("m") == [a]
        assert s.get_judgments("v") == [j] and s.get_battles("v") == [b]
        assert s.lookup_calls(["k"])["k"].status == "ok"
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with Store(tmp_path / "ws", readonly=True) as s:  # now readable
        assert s.get_answers("m") == [a]


def test_a_newer_workspace_is_refused(tmp_path):
    Store(tmp_path / "ws").close()
    db = sqlite3.connect(tmp_path / "ws" / "arena.db")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    for readonly in (False, True):
        with pytest.raises(ArenaError, match="newer release"):
            Store(tmp_path / "ws", readonly=readonly)


def test_sets_with_colliding_ids_keep_their_own_answers(tmp_path):
    with Store(tmp_path / "ws") as s:
        s.put_answers([Answer(prompt_id="p1", model="m", turns=["test answer"])], "test")
        s.put_answers([Answer(prompt_id="p1", model="m", turns=["slice answer"])], "pool/D1")
        assert [x.turns for x in s.get_answers("m", "test")] == [["test answer"]]
        assert [x.turns for x in s.get_answers("m", "pool/D1")] == [["slice answer"]]
        s.replace_battles("v", [Battle(prompt_id="p1", model_a="m", model_b="n", outcome="tie", judge="v")], "pool/D1")
        assert s.get_battles("v", "test") == [] and len(s.get_battles("v", "pool/D1")) == 1


def test_usage_counts_only_the_current_test_set(tmp_path):
    cfg = RunConfig.model_validate({"name": "u", "models": [
        {"name": "m", "engine": "imported", "price_in": 1e6, "price_out": 0},
        {"name": "n", "engine": "imported"}]})
    with Store(tmp_path / "ws") as s:
        s.put_prompts("test", [Prompt(id=f"p{i}", turns=["q"]) for i in range(4)])
        s.put_answers([Answer(prompt_id=f"p{i}", model="m", turns=["a"], tokens_in=10) for i in range(4)])
        s.put_answers([Answer(prompt_id="p0", model="m", turns=["a"], tokens_in=1000)], "pool/D0")
        assert pipeline.usage(cfg, s)[0]["tokens_in"] == 40
        s.put_prompts("test", [Prompt(id="p0", turns=["q"])])  # the test set shrinks
        row = pipeline.usage(cfg, s)[0]
        assert (row["calls"], row["tokens_in"], row["cost"]) == (1, 10, 10.0)


def test_read_commands_never_create_a_workspace(tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    for cmd in (["leaderboard", str(empty)], ["compare", str(empty), str(empty)], ["report", str(empty)],
                ["winrates", str(empty)], ["judge-audit", str(empty)], ["forget", str(empty), "-m", "x"],
                ["vacuum", str(empty)]):
        proc = subprocess.run([*ARENA, *cmd], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (cmd, proc.stderr)
        assert "not a workspace" in proc.stderr
    assert list(empty.iterdir()) == []


HOLDER = """
import sys, time
from arena_learning.store import Store
s = Store(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_one_writer_at_a_time_and_the_second_is_told_who(tmp_path):
    ws = tmp_path / "ws"
    Store(ws).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ws)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(WorkspaceLocked, match=f"pid {holder.pid}"):
            Store(ws)
        with Store(ws, readonly=True) as r:  # readers are welcome
            assert r.get_answers() == []
        proc = subprocess.run([*ARENA, "vacuum", str(ws)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and f"pid {holder.pid}" in proc.stderr and "one writer at a time" in proc.stderr
    finally:
        holder.kill()
        holder.wait()
    # the kernel releases a killed holder's lock: the next writer gets in at once
    with Store(ws) as s, Store(ws) as same_process:
        assert s.get_answers() == same_process.get_answers() == []


def test_forget_and_vacuum(tmp_path):
    ws = tmp_path / "ws"
    with Store(ws) as s:
        s.put_prompts("test", [Prompt(id="p1", turns=["q"])])
        s.put_answers([Answer(prompt_id="p1", model="m", turns=["a"]), Answer(prompt_id="p1", model="n", turns=["b"]),
                       Answer(prompt_id="gone", model="n", turns=["old"])])
        s.replace_battles("v", [Battle(prompt_id="p1", model_a="m", model_b="n", outcome="tie", judge="v")])
        s.record_calls([
            {"key": "k1", "engine": "e", "model": "x", "request": {}, "status": "ok", "response": {"text": "a"},
             "requested_by": "m"},
            {"key": "k2", "engine": "e", "model": "x", "request": {}, "status": "ok", "response": {"text": "b"},
             "requested_by": "n"},
            {"key": "k3", "engine": "e", "model": "x", "request": {}, "status": "error", "error": "503",
             "requested_by": "n"},
        ])
    proc = subprocess.run([*ARENA, "forget", str(ws), "--model", "m"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "forgot m: 1 answers, 0 judgments, 1 battles, 0 votes, 1 ledger calls" in proc.stderr
    proc = subprocess.run([*ARENA, "vacuum", str(ws)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "dropped 1 answers" in proc.stderr and "1 failed calls" in proc.stderr
    with Store(ws, readonly=True) as s:
        assert [(a.prompt_id, a.model) for a in s.get_answers()] == [("p1", "n")]
        assert set(s.lookup_calls(["k1", "k2", "k3"])) == {"k2"}
        assert s.get_battles("v") == []


def test_info_shows_sets_and_each_models_ledger_identity(tmp_path):
    ws = tmp_path / "ws"
    with Store(ws) as s:
        s.put_prompts("test", [Prompt(id="p1", turns=["q"])])
        s.put_answers([Answer(prompt_id="p1", model="m", turns=["a"])], "pool/D0")
        s.record_calls([{"key": "k1", "engine": "llamacpp", "model": "x.gguf@sha256:abc", "request": {}, "status": "ok",
                         "response": {"text": "a"}, "requested_by": "m"}])
    proc = subprocess.run([*ARENA, "info", str(ws), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == SCHEMA_VERSION and data["prompt_sets"] == {"test": 1}
    assert data["answers_per_set"] == {"pool/D0": 1}
    assert data["models"] == {"m": ["llamacpp:x.gguf@sha256:abc"]}
    assert data["writer"] is None
