"""Batch mode for engine: anthropic: a battle stage's judge calls as Message Batches, sent through the official
``anthropic`` SDK to a local stand-in for the Message Batches endpoints (tests/anthropic_server.py) that answers
each request as its ``POST /v1/messages`` does: the synchronous verdicts under the same ledger keys, split under a
limit, no request answered twice, a stopped run resumed by polling, errored requests asked again, the batch
price."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import anthropic  # in the `all` extra that `make` installs: its absence fails, never skips
import pytest

from arena_learning.store import Store

from .conftest import ARENA
from .test_batch_mode import MODELS, PROMPTS, battle, flaky, judge, ledger, make_workspace, write_config

CALLS = PROMPTS * 3 * 2  # 3 pairs x 2 orders


def config(url, **batch):
    judge_model = {"name": "judge", "engine": "anthropic", "model": "claude-judge", "base_url": url,
                   "max_retries": 0, "price_in": 3.0, "price_out": 15.0}
    if batch:
        judge_model["batch"] = {"enabled": True, "poll_s": 0.02, **batch}
    return {"name": "b", "prompts": {"set": "open"}, "models": [{"name": m, "engine": "imported"} for m in MODELS],
            "judge": {"kind": "llm", "name": "pj", "retries": 0, "model": judge_model},
            "audit": {"canaries": False}}


@pytest.fixture
def synchronous(tmp_path, messages_server):
    """The stage run one request each (POST /v1/messages): its verdicts and ledger, what batch mode must equal."""
    server = messages_server(judge)
    ws = make_workspace(tmp_path / "sync")
    report, verdicts = battle(config(server.base_url), ws)
    assert report.failed == 0 and len(verdicts) == CALLS and server.counts()["requests"] == CALLS
    return verdicts, ledger(ws)


def test_message_batches_give_the_synchronous_verdicts_and_keys_in_several_batches(tmp_path, messages_server,
                                                                                   synchronous):
    verdicts, keys = synchronous
    server = messages_server(judge)
    ws = make_workspace(tmp_path / "batch")
    report, got = battle(config(server.base_url, max_requests=50), ws)
    assert got == verdicts and ledger(ws) == keys  # the same verdicts under the same ledger keys
    assert server.counts() == {"created": 4, "requests": CALLS, "duplicates": 0} and not server.bodies
    assert report.stats["sent"] == CALLS
    with Store(ws, readonly=True) as store:
        jobs = store.get_batches()
        (spend,) = store.spend_rows()
    assert {j.batch_id for j in jobs} == set(server.batches)
    assert sorted((j.status, j.calls, j.counts["succeeded"]) for j in jobs) == [("ended", 30, 30)] + [
        ("ended", 50, 50)] * 3
    # priced at the batch price: half of $3 / $15 per 1M tokens in / out, on the stand-in's own usage
    assert spend["batch"] and spend["calls"] == CALLS and spend["stage"].startswith("battles")
    paid = (spend["tokens_in"] * 3.0 + spend["tokens_out"] * 15.0) / 1e6 * 0.5
    assert spend["usd"] == pytest.approx(paid, rel=1e-9) and spend["tokens_out"] == 12 * CALLS
    # A rerun, in batch mode or not, finds every call in the ledger.
    battle(config(server.base_url, max_requests=50), ws)
    battle(config(server.base_url), ws)
    assert server.counts() == {"created": 4, "requests": CALLS, "duplicates": 0}


def test_a_batch_that_could_pass_the_spend_limit_is_not_created(tmp_path, messages_server):
    from arena_learning.errors import SpendLimitReached

    server = messages_server(judge)
    ws = make_workspace(tmp_path / "limit")
    # each call held at its max_tokens bound, at the batch price, before its batch is created
    with pytest.raises(SpendLimitReached, match="spend limit reached"):
        battle({**config(server.base_url, max_requests=50), "spend_limit": {"usd": 0.0001}}, ws)
    assert server.counts() == {"created": 0, "requests": 0, "duplicates": 0}
    battle({**config(server.base_url, max_requests=50), "spend_limit": {"usd": 100.0}}, ws)
    assert server.counts() == {"created": 4, "requests": CALLS, "duplicates": 0}


def test_a_stage_is_split_under_the_byte_limit_too(tmp_path, messages_server, synchronous):
    verdicts, _ = synchronous
    server = messages_server(judge)
    ws = make_workspace(tmp_path / "bytes")
    assert battle(config(server.base_url, max_bytes=40_000), ws)[1] == verdicts
    sizes = [sum(len(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode()) + 1 for r in requests)
             for requests in server.requests.values()]
    assert len(sizes) >= 3 and max(sizes) <= 40_000 and sum(map(len, server.requests.values())) == CALLS


def test_errored_requests_are_asked_again_in_a_new_batch(tmp_path, messages_server, synchronous):
    verdicts, _ = synchronous
    server = messages_server(flaky({"3", "7"}))  # a prompt's first request: HTTP 500, an errored result
    ws = make_workspace(tmp_path / "retry")
    report, got = battle(config(server.base_url, max_requests=100), ws)
    assert got == verdicts and report.failed == 0
    with Store(ws, readonly=True) as store:
        jobs = store.get_batches()
    assert [j.calls for j in jobs] == [100, 80, 12] and sum(j.counts["errored"] for j in jobs) == 12
    assert jobs[2].counts == {"processing": 0, "succeeded": 12, "errored": 0, "canceled": 0, "expired": 0}
    assert server.counts() == {"created": 3, "requests": CALLS + 12, "duplicates": 12}


def test_an_expired_batch_keeps_what_it_finished(tmp_path, messages_server, synchronous):
    verdicts, _ = synchronous
    server = messages_server(judge, concurrency=1, expire_after=70)
    ws = make_workspace(tmp_path / "expired")
    report, got = battle(config(server.base_url, retries=0), ws)
    assert {k: v for k, v in got.items() if v[0] == "ok"}.items() <= verdicts.items()
    assert report.failed == CALLS - 70 and server.duplicates == 0
    with Store(ws, readonly=True) as store:
        (job,) = store.get_batches()
    assert job.counts["succeeded"] == 70 and job.counts["expired"] == CALLS - 70
    server.expire_after = None
    assert battle(config(server.base_url, retries=0), ws)[1] == verdicts  # the rest, in a new batch
    assert server.counts() == {"created": 2, "requests": CALLS, "duplicates": 0}


def stored(ws) -> bool:
    """Whether the workspace holds a batch id (a Message Batch has no metadata: the stored id is how it is found)."""
    if not (ws / "arena.db").exists():
        return False
    db = sqlite3.connect(ws / "arena.db")
    try:
        return bool(db.execute("SELECT COUNT(*) FROM batches WHERE batch_id IS NOT NULL").fetchone()[0])
    except sqlite3.OperationalError:  # not yet made
        return False
    finally:
        db.close()


def test_a_run_stopped_while_its_batch_is_open_resumes_it_by_polling(tmp_path, messages_server, synchronous):
    verdicts, _ = synchronous
    server = messages_server(judge)
    ws = make_workspace(tmp_path / "killed")
    cfg = write_config(tmp_path / "b.yaml", config(server.base_url, retries=1))
    server.hold()
    proc = subprocess.Popen([*ARENA, "battle", str(cfg), "-w", str(ws)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while not stored(ws) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)  # until the batch's id is stored, as its creation returned
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert server.counts() == {"created": 1, "requests": 0, "duplicates": 0}
    with Store(ws, readonly=True) as store:
        (job,) = store.get_batches()
    assert job.status == "open" and job.batch_id in server.batches
    server.release()
    report, got = battle(config(server.base_url, retries=1), ws)
    assert got == verdicts and report.failed == 0
    assert server.counts() == {"created": 1, "requests": CALLS, "duplicates": 0}  # polled, not submitted again


def test_the_stand_in_answers_the_sdk_as_the_message_batches_api_does(messages_server):
    server = messages_server(lambda body: "fine")
    server.hold()
    client = anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0)
    params = {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.BadRequestError, match="custom_id"):
        client.messages.batches.create(requests=[{"custom_id": "a" * 65, "params": params}])
    with pytest.raises(anthropic.BadRequestError, match="more than once"):
        client.messages.batches.create(requests=[{"custom_id": "a", "params": params}] * 2)
    first = client.messages.batches.create(requests=[{"custom_id": "ok", "params": params},
                                                     {"custom_id": "bad", "params": {**params, "messages": []}}])
    second = client.messages.batches.create(requests=[{"custom_id": "c", "params": params}])
    assert first.processing_status == "in_progress" and first.request_counts.processing == 2
    assert [b.id for b in client.messages.batches.list(limit=1)] == [second.id, first.id]  # newest first, paged
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        client.messages.batches.results(first.id)  # not ended: no results yet
    assert client.messages.batches.cancel(second.id).processing_status == "canceling"
    server.release()
    for batch_id in (first.id, second.id):
        while client.messages.batches.retrieve(batch_id).processing_status != "ended":
            time.sleep(0.01)
    results = {r.custom_id: r.result for r in client.messages.batches.results(first.id)}
    assert results["ok"].type == "succeeded" and results["ok"].message.content[0].text == "fine"
    assert results["bad"].type == "errored" and results["bad"].error.error.type == "invalid_request_error"
    assert [r.result.type for r in client.messages.batches.results(second.id)] == ["canceled"]
    assert client.messages.batches.retrieve(second.id).request_counts.canceled == 1
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve("msgbatch_missing")
