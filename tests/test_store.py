from __future__ import annotations

import sqlite3

from arena_learning.records import Answer, Battle, Prompt
from arena_learning.store import Store, call_key


def row(key, status, **kw):
    base = {"key": key, "engine": "openai", "model": "m", "request": {"messages": [{"role": "user", "content": "hi"}]}}
    return {**base, "status": status, **kw}


def test_store_is_a_wal_sqlite_file(tmp_path):
    Store(tmp_path / "ws").close()
    db = sqlite3.connect(tmp_path / "ws" / "arena.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"calls", "prompts", "answers", "judgments", "battles", "meta"} <= tables


def test_call_key_depends_on_every_part_and_not_on_dict_order():
    k = call_key("openai", "m", {"a": 1, "b": 2}, {"messages": [{"role": "user", "content": "x"}]})
    assert k == call_key("openai", "m", {"b": 2, "a": 1}, {"messages": [{"role": "user", "content": "x"}]})
    assert k != call_key("llamacpp", "m", {"a": 1, "b": 2}, {"messages": [{"role": "user", "content": "x"}]})
    assert k != call_key("openai", "m2", {"a": 1, "b": 2}, {"messages": [{"role": "user", "content": "x"}]})
    assert k != call_key("openai", "m", {"a": 1, "b": 3}, {"messages": [{"role": "user", "content": "x"}]})
    assert k != call_key("openai", "m", {"a": 1, "b": 2}, {"messages": [{"role": "user", "content": "y"}]})


def test_failure_is_retried_and_success_is_never_overwritten(tmp_path):
    with Store(tmp_path) as s:
        s.record_calls([row("k1", "error", error="HTTP 503")])
        rec = s.lookup_calls(["k1"])["k1"]
        assert (rec.status, rec.error, rec.response) == ("error", "HTTP 503", None)
        s.record_calls([row("k1", "ok", response={"text": "hello"}, tokens_in=3, tokens_out=1)])
        rec = s.lookup_calls(["k1"])["k1"]
        assert (rec.status, rec.response, rec.attempts) == ("ok", {"text": "hello"}, 2)
        s.record_calls([row("k1", "error", error="late failure"), row("k1", "ok", response={"text": "other"})])
        rec = s.lookup_calls(["k1"])["k1"]
        assert (rec.status, rec.response, rec.error, rec.attempts) == ("ok", {"text": "hello"}, None, 2)
        assert s.call_counts() == {"ok": 1}


def test_lookup_handles_more_keys_than_sqlite_variables(tmp_path):
    with Store(tmp_path) as s:
        s.record_calls([row(f"k{i}", "ok", response={"text": str(i)}) for i in range(1200)])
        found = s.lookup_calls([f"k{i}" for i in range(0, 1500)])
        assert len(found) == 1200 and found["k1199"].response == {"text": "1199"}


def test_artifacts_round_trip_and_survive_reopening(tmp_path):
    prompts = [Prompt(id=f"p{i}", turns=[f"q{i}", "follow-up"], category="c") for i in range(3)]
    with Store(tmp_path) as s:
        s.put_prompts("test", prompts)
        s.put_answers([Answer(prompt_id="p0", model="m", turns=["a", "b"], tokens_out=2)])
        s.replace_battles("j", [Battle(prompt_id="p0", model_a="m", model_b="n", outcome="tie", judge="j")])
        s.set_meta("config", {"name": "x"})
    with Store(tmp_path) as s:
        assert s.get_prompts("test") == prompts
        assert s.get_answers("m")[0].turns == ["a", "b"]
        assert s.get_battles("j")[0].outcome == "tie"
        assert s.get_meta("config") == {"name": "x"}
        assert s.prompt_sets() == {"test": 3}


def test_a_key_from_encoded_parts_is_the_key_of_the_whole_canonical_json():
    # call_key_json assembles the blob from parts encoded once: it must hash the bytes that encoding the whole
    # {engine, model, params, payload} dict canonically gives, or every ledger already written would be lost
    import hashlib
    import json

    from arena_learning.engines.base import Request
    from arena_learning.store import call_key_json, canonical_json

    def whole(engine, model, params, payload):
        blob = json.dumps({"engine": engine, "model": model, "params": params, "payload": payload}, sort_keys=True,
                          ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    params = {"temperature": 0.0, "seed": 3, "stop": ["\n\n"], "json_schema": {"type": "object", "required": ["a"]},
              "chat": None, "top_p": 1.0}
    for engine, model, payload in [
        ("openai", "judge", {"messages": [{"role": "system", "content": 'caf\u00e9 "q" \\ \n\u2028 \U0001f600'},
                                          {"role": "user", "content": "<<<ANSWER A 0123456789>>>"}]}),
        ("llamacpp", 'x.gguf@sha256:"ab"', {"prompt": "Question: 3 + 2?\nAnswer:"}),
    ]:
        req = Request.model_validate(payload)
        assert req.payload_json() == canonical_json(payload)
        assert call_key_json(engine, model, canonical_json(params), req.payload_json()) \
            == whole(engine, model, params, payload) == call_key(engine, model, params, payload)
    # a stored key, written by the whole-dict encoding: it stays the key of the same call
    assert call_key("openai", "m", {"temperature": 0.0}, {"prompt": "hi"}) == \
        hashlib.sha256(b'{"engine":"openai","model":"m","params":{"temperature":0.0},"payload":{"prompt":"hi"}}'
                       ).hexdigest()


def test_the_ledger_writer_commits_on_its_thread_and_close_waits_and_raises(tmp_path):
    # results are committed off the event loop, one commit at a time; close() waits for the one under way and
    # commits the rest, and a commit that failed is raised there, never lost in a callback
    import asyncio
    import threading
    import time

    import pytest

    from arena_learning.engines.calls import _LedgerWriter

    def row(i: int) -> dict:
        return {"key": f"k{i}", "engine": "openai", "model": "m", "request": {"i": i}, "status": "ok",
                "response": {"text": str(i)}}

    threads: list[str] = []

    async def batch(store: Store) -> None:
        record = store.record_calls

        def spy(rows):
            threads.append(threading.current_thread().name)
            time.sleep(0.005)  # a commit takes a while: results arrive while it runs
            record(rows)

        store.record_calls = spy  # type: ignore[method-assign]  # to see which thread commits, and when
        writer = _LedgerWriter(store, delay=0.001)
        for i in range(50):
            writer.add(row(i))
            await asyncio.sleep(0.0005 if i % 10 else 0.01)  # results arrive over several commits
        writer.add(row(50))
        await asyncio.sleep(0.002)  # a commit is under way, with a result waiting for the next one ...
        writer.add(row(51))
        await writer.close()
        commits = len(threads)
        await asyncio.sleep(0.05)  # ... and once closed, nothing is committed later (the loop runs on)
        assert len(threads) == commits

    with Store(tmp_path / "ws") as store:
        asyncio.run(batch(store))
        assert len(store.lookup_calls([f"k{i}" for i in range(52)])) == 52
    assert any(name.startswith("ledger") for name in threads)

    async def failing(store: Store) -> None:
        writer = _LedgerWriter(store, delay=0.001)
        writer.add(row(1))
        await asyncio.sleep(0.05)  # the commit ran on the thread, and failed
        writer.add(row(2))
        await writer.close()

    store = Store(tmp_path / "ws2")
    store.db.close()  # every commit now fails
    with pytest.raises(sqlite3.ProgrammingError):
        asyncio.run(failing(store))
    store.close()  # releases the workspace (closing the connection again is a no-op)
