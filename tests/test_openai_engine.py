"""The `openai` engine against real HTTP servers on 127.0.0.1: `arena serve` over the bundled model,
and scripted endpoints for rate limits, outages and load spreading."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.base import Request
from arena_learning.engines.calls import CallStats, run_requests
from arena_learning.store import Store

from .conftest import SERVE_CONFIG, Reply, http_error

QUESTIONS = ["What is 2 + 3?", "What is the capital of France?", "Spell the word 'cat' backwards.",
             "How many letters are in the word 'apple'?"]


def chat(q):
    return Request(messages=[{"role": "user", "content": q}])


def openai_spec(base_url, **kw):
    return ModelSpec(name="remote", engine="openai", model=kw.pop("model", "gemma-2shot"), base_url=base_url,
                     params={"max_tokens": 16, "temperature": 0.0}, **kw)


@pytest.mark.slow  # loads a model
def test_openai_engine_through_arena_serve_equals_the_in_process_engine(served_model, tmp_path):
    url, _ = served_model
    import yaml

    local_spec = ModelSpec.model_validate(yaml.safe_load(SERVE_CONFIG)["models"][0])
    local = build_engine(local_spec)
    # the in-process engine's own path (batched, parallel 8 as served): an answer is a function of its request alone
    expected = [asyncio.run(local.complete(chat(q))).text for q in QUESTIONS]

    with Store(tmp_path) as store:
        stats = CallStats()
        got = run_requests(store, build_engine(openai_spec(url)), [chat(q) for q in QUESTIONS], stats=stats,
                           show_progress=False)
        assert [c.text for c in got] == expected
        assert all(c.tokens_in > 0 and c.tokens_out > 0 for c in got)
        assert (stats.sent, stats.ok, stats.cached) == (4, 4, 0)
        # A rerun is served by the ledger: no request reaches the server.
        before = httpx.get(url.removesuffix("/v1") + "/health").json()["requests"]
        stats2 = CallStats()
        again = run_requests(store, build_engine(openai_spec(url)), [chat(q) for q in QUESTIONS], stats=stats2,
                             show_progress=False)
        assert [c.text for c in again] == expected
        assert (stats2.sent, stats2.cached) == (0, 4)
        assert httpx.get(url.removesuffix("/v1") + "/health").json()["requests"] == before


@pytest.mark.slow  # loads a model
def test_arena_serve_speaks_the_openai_api(served_model):
    url, _ = served_model
    models = httpx.get(url + "/models").json()
    assert [m["id"] for m in models["data"]] == ["gemma-2shot"]
    r = httpx.post(url + "/completions", json={"model": "gemma-2shot", "prompt": "Question: What is 1 + 1?\nAnswer:",
                                               "max_tokens": 4, "temperature": 0, "stop": "\n"}, timeout=60)
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion" and body["usage"]["completion_tokens"] >= 1
    r = httpx.post(url + "/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404 and "not found" in r.json()["error"]["message"]
    r = httpx.post(url + "/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400  # bad JSON (a body of another type is a 415: tests/test_security_serve.py)


@pytest.mark.slow  # loads a model
def test_unknown_model_fails_at_once_and_is_recorded_not_cached(served_model, tmp_path):
    url, _ = served_model
    with Store(tmp_path) as store:
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(url, model="nope")), [chat("hi")], stats=stats,
                           show_progress=False)
        assert out == [None] and stats.failed == 1 and "HTTP 404" in stats.errors[0]
        assert store.call_counts() == {"error": 1}


def named(name="s"):
    """A script replying ``name:question``, what the load and retry tests tell their endpoints apart by."""
    return lambda body: f"{name}:{body['messages'][-1]['content']}"


def failing(fail, status=429, retry_after=None):
    """A script that fails the first `fail` requests with `status` (and a Retry-After header), then answers."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return [http_error(status, "slow down", **headers)] * fail + [named()]


@pytest.mark.parametrize("status,retry_after", [(429, 0), (503, None), (500, None)])
def test_rate_limits_and_server_errors_are_retried(tmp_path, scripted_server, status, retry_after):
    srv = scripted_server(failing(2, status, retry_after))
    engine = build_engine(openai_spec(srv.url, max_retries=3))
    with Store(tmp_path) as store:
        out = run_requests(store, engine, [chat("x")], show_progress=False)
    assert out[0].text == "s:x" and srv.requests == 3 and engine.retries == 2


def test_retry_after_is_honoured(tmp_path, scripted_server):
    srv = scripted_server(failing(1, 429, retry_after=1))
    engine = build_engine(openai_spec(srv.url, max_retries=1))
    import time

    t = time.perf_counter()
    with Store(tmp_path) as store:
        out = run_requests(store, engine, [chat("x")], show_progress=False)
    assert out[0].text == "s:x" and time.perf_counter() - t >= 0.95


def test_exhausted_retries_are_recorded_and_retried_next_run(tmp_path, scripted_server):
    srv = scripted_server(failing(3, 503))
    with Store(tmp_path) as store:
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url, max_retries=1)), [chat("x")], stats=stats,
                           show_progress=False)
        assert out == [None] and stats.failed == 1 and "gave up after 2 attempts" in stats.errors[0]
        assert store.call_counts() == {"error": 1}
        out = run_requests(store, build_engine(openai_spec(srv.url, max_retries=1)), [chat("x")],
                           show_progress=False)
        assert out[0].text == "s:x" and srv.requests == 4
        assert store.call_counts() == {"ok": 1}
        (_, attempts), = store.db.execute("SELECT status, attempts FROM calls").fetchall()
        assert attempts == 2


def test_connection_errors_are_retried_then_fail(tmp_path):
    from .conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}/v1"
    with Store(tmp_path) as store:
        stats = CallStats()
        engine = build_engine(openai_spec(dead, max_retries=2))
        out = run_requests(store, engine, [chat("x")], stats=stats, show_progress=False)
    assert out == [None] and engine.retries == 2 and "ClientConnectorError" in stats.errors[0]


def test_several_base_urls_spread_the_load_and_the_key_stays_out_of_the_store(tmp_path, scripted_server,
                                                                               monkeypatch):
    monkeypatch.setenv("ARENA_TEST_KEY", "sk-secret-123456")
    a, b = scripted_server(named("a")), scripted_server(named("b"))
    spec = openai_spec([a.url, b.url], concurrency=4, api_key_env="ARENA_TEST_KEY")
    reqs = [chat(f"q{i}") for i in range(200)]
    with Store(tmp_path) as store:
        out = run_requests(store, build_engine(spec), reqs, show_progress=False)
    assert [c.text.split(":")[1] for c in out] == [f"q{i}" for i in range(200)]
    assert a.requests + b.requests == 200 and min(a.requests, b.requests) >= 50
    assert {h.get("Authorization") for h in a.headers + b.headers} == {"Bearer sk-secret-123456"}
    for f in tmp_path.iterdir():
        assert b"sk-secret-123456" not in f.read_bytes(), f


def test_concurrency_limit_per_endpoint_is_respected(tmp_path, scripted_server):
    srv = scripted_server(named(), delay=0.02)
    with Store(tmp_path) as store:
        run_requests(store, build_engine(openai_spec(srv.url, concurrency=3)), [chat(str(i)) for i in range(30)],
                     show_progress=False)
    assert srv.peak == 3


# ---- what counts as an answer, and how long it took ------------------------------------------------


def replies(*replies):
    """A script answering with the given (content, finish_reason) replies in turn, then the last one forever."""
    return [Reply(content, finish=finish, usage=(5, 3)) for content, finish in replies]


def ledger_rows(store):
    return store.db.execute("SELECT status, error, response, attempts, latency_s FROM calls").fetchall()


def test_latency_runs_from_the_send_not_from_the_wait_for_a_slot(tmp_path, scripted_server):
    # One slot, four requests, each held by the server. By event order alone, each request's latency is at least
    # the hold (sent before it arrived, read after the hold) and less than the time from the reply before it (after
    # the previous arrival's hold: the slot frees when a reply is read) to the next arrival (or the run's end).
    # Counted from the wait for the slot, the later requests' latencies would take in the requests before them.
    import time

    hold, n = 0.2, 4
    srv = scripted_server(replies(("ok", "stop")), delay=hold)
    with Store(tmp_path) as store:
        begin = time.monotonic()
        out = run_requests(store, build_engine(openai_spec(srv.url, concurrency=1)),
                           [chat(f"q{i}") for i in range(n)], show_progress=False)
        end = time.monotonic()
        recorded = [row[4] for row in ledger_rows(store)]
    assert srv.peak == 1 and srv.requests == n
    latency = {f"q{i}": c.latency_s for i, c in enumerate(out)}
    arrived = [b["messages"][-1]["content"] for b in srv.bodies]  # one at a time: bodies in arrival order
    after = [begin] + [t + hold for t in srv.arrivals[:-1]]       # the slot is free again no sooner than this
    before = [*srv.arrivals[1:], end]                               # ... and the next request arrives after
    for q, free, nxt in zip(arrived, after, before):
        assert hold <= latency[q] < nxt - free, (q, latency[q], nxt - free)
    assert sorted(recorded) == sorted(latency.values())


@pytest.fixture
def quick_backoff(monkeypatch):
    from arena_learning.engines import calls

    monkeypatch.setattr(calls, "EMPTY_BACKOFF_S", 0.01)


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_an_empty_reply_is_asked_again_within_the_run(tmp_path, scripted_server, quick_backoff, content):
    srv = scripted_server(replies((content, "stop"), ("an answer", "stop")))
    with Store(tmp_path) as store:
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url)), [chat("x")], stats=stats,
                           show_progress=False)
        assert out[0].text == "an answer" and (stats.sent, stats.ok, stats.failed, stats.empty) == (1, 1, 0, 0)
        ((status, error, _, attempts, _),) = ledger_rows(store)
        assert (status, error, attempts) == ("ok", None, 1) and srv.requests == 2


def test_a_reply_that_stays_empty_is_the_models_answer_and_is_not_asked_again(tmp_path, scripted_server,
                                                                               quick_backoff):
    from arena_learning.engines.calls import KEPT_EMPTY

    srv = scripted_server(replies(("", "stop")))
    with Store(tmp_path) as store:
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url, empty_retries=2)), [chat("x")], stats=stats,
                           show_progress=False)
        assert out[0] is not None and out[0].text == "" and (stats.ok, stats.failed, stats.empty) == (1, 0, 1)
        assert srv.requests == 3                                         # the first try and 2 retries
        ((status, error, _, _, _),) = ledger_rows(store)
        assert status == "ok" and error.startswith(KEPT_EMPTY) and "after 3 tries" in error
        again = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url)), [chat("x")], stats=again, show_progress=False)
        assert out[0].text == "" and (again.cached, again.sent, again.empty) == (1, 0, 1) and srv.requests == 3
        # a model that now fails empty replies asks again what an earlier run kept
        out = run_requests(store, build_engine(openai_spec(srv.url, empty_replies="fail", empty_retries=0)),
                           [chat("x")], show_progress=False)
        assert out == [None] and srv.requests == 4


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_with_empty_replies_fail_an_empty_completion_is_a_failure_retried_next_run(tmp_path, scripted_server,
                                                                                    content):
    srv = scripted_server(replies((content, "stop"), ("an answer", "stop")))
    flaky = {"empty_replies": "fail", "empty_retries": 0}
    with Store(tmp_path) as store:
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url, **flaky)), [chat("x")], stats=stats,
                           show_progress=False)
        assert out == [None] and (stats.failed, stats.empty, stats.ok) == (1, 1, 0)
        ((status, error, response, _, _),) = ledger_rows(store)
        assert status == "error" and "empty completion" in error and response is None
        # Never used as an answer: the next run asks again and keeps the real answer.
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url, **flaky)), [chat("x")], stats=stats,
                           show_progress=False)
        assert out[0].text == "an answer" and (stats.sent, stats.ok, stats.cached) == (1, 1, 0)
        ((status, error, _, attempts, _),) = ledger_rows(store)
        assert (status, attempts) == ("ok", 2) and srv.requests == 2


def test_an_empty_success_from_an_older_ledger_is_asked_again(tmp_path, scripted_server):
    from arena_learning.engines.calls import request_key

    srv = scripted_server(replies(("now an answer", "stop")))
    engine = build_engine(openai_spec(srv.url))
    req = chat("x")
    with Store(tmp_path) as store:
        # What a version that cached `content: null` as "" left behind.
        store.record_calls([{"key": request_key(engine, req), "engine": engine.kind, "model": engine.model_id,
                             "request": {"params": engine.key_params(req), **req.payload()}, "status": "ok",
                             "response": {"text": "", "finish_reason": "stop"}}])
        stats = CallStats()
        out = run_requests(store, engine, [req], stats=stats, show_progress=False)
        assert out[0].text == "now an answer" and (stats.sent, stats.cached) == (1, 0)
        ((status, _, response, _, _),) = ledger_rows(store)
        assert status == "ok" and json.loads(response)["text"] == "now an answer"


def test_a_cut_off_completion_is_kept_marked_and_counted(tmp_path, scripted_server):
    from arena_learning.arena.answers import answer_prompts
    from arena_learning.records import Prompt

    srv = scripted_server(replies(("a long answer that was cut", "length"), ("fine", "stop")))
    with Store(tmp_path) as store:
        stats = CallStats()
        out = run_requests(store, build_engine(openai_spec(srv.url)), [chat("x")], stats=stats,
                           show_progress=False)
        assert out[0].text == "a long answer that was cut" and out[0].finish_reason == "length"
        assert (stats.ok, stats.truncated) == (1, 1)
        ((status, _, response, _, _),) = ledger_rows(store)
        assert status == "ok" and json.loads(response)["finish_reason"] == "length"
        # Served by the ledger, it is still counted as cut off.
        stats = CallStats()
        run_requests(store, build_engine(openai_spec(srv.url)), [chat("x")], stats=stats, show_progress=False)
        assert (stats.cached, stats.truncated) == (1, 1)
        # An answer carries how many of its turns were cut off.
        result = asyncio.run(answer_prompts(store, "m", build_engine(openai_spec(srv.url)),
                                            [Prompt(id="p", turns=["x", "y"])]))
        (answer,) = result.answers
        assert answer.turns == ["a long answer that was cut", "fine"] and answer.truncated == 1
        assert result.stats.truncated == 1


def test_a_call_is_sent_and_stored_from_one_encoding_of_its_messages(tmp_path, scripted_server):
    # the body's messages and the ledger row's request are spliced from the payload JSON its key was made of
    from arena_learning.engines.calls import request_key

    server = scripted_server(named())
    text = 'caf\u00e9 "quoted" \\ back\nslash \U0001f600 <<<not a fence>>>'
    req = Request(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
                  params={"temperature": 0.0})
    engine = build_engine(openai_spec(server.url))
    with Store(tmp_path) as store:
        (out,) = run_requests(store, engine, [req], show_progress=False)
        (key, request), = store.db.execute("SELECT key, request FROM calls").fetchall()
    assert out is not None and out.text == "s:" + text
    (body,) = server.bodies
    assert body["messages"] == req.messages and body["model"] == "gemma-2shot" and body["temperature"] == 0.0
    assert key == request_key(engine, req)
    assert json.loads(request) == {"params": engine.key_params(req), "messages": req.messages}
