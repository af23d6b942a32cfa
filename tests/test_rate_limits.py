"""Requests and tokens per minute per endpoint: a real server on 127.0.0.1 counts what reaches it, per second."""

from __future__ import annotations

import asyncio
import time

import pytest

from arena_learning.config import ModelSpec, RunConfig, validate_config
from arena_learning.engines import build_engine
from arena_learning.engines.base import Request
from arena_learning.engines.calls import CallStats, run_requests
from arena_learning.engines.ratelimit import TokenBucket
from arena_learning.errors import ConfigError
from arena_learning.store import Store


def counting_server(scripted_server, usage_tokens: int = 10):
    """An endpoint that answers at once with replies of ``usage_tokens`` (the server notes when each arrived)."""
    return scripted_server(lambda body: "ok " + body["messages"][-1]["content"],
                           usage=(usage_tokens // 2, usage_tokens - usage_tokens // 2))


def most_in_one_second(server, weights: list[int] | None = None) -> int:
    """Return the most requests (or weight) that arrived at ``server`` within any one second."""
    weights = weights or [1] * len(server.arrivals)
    pairs = sorted(zip(server.arrivals, weights))
    return max(sum(w for t2, w in pairs if t <= t2 < t + 1.0) for t, _ in pairs)


def spec(url, **kw) -> ModelSpec:
    return ModelSpec(name="remote", engine="openai", model="m", base_url=url, concurrency=64, max_retries=0,
                     params={"max_tokens": 40}, **kw)


def ask(store, model_spec, n, prefix="q"):
    stats = CallStats()
    start = time.monotonic()
    out = run_requests(store, build_engine(model_spec), [Request(messages=[{"role": "user", "content": f"{prefix}{i}"}])
                                                         for i in range(n)], stats=stats, show_progress=False)
    return out, stats, time.monotonic() - start


def test_requests_per_minute_hold_in_every_second_at_the_server(tmp_path, scripted_server):
    srv = counting_server(scripted_server)
    with Store(tmp_path) as store:
        # 1200 per minute is 20 per second; 60 requests at concurrency 64 would otherwise arrive at once.
        out, stats, elapsed = ask(store, spec(srv.url, rpm=1200), 60)
    assert stats.ok == 60 and all(c is not None for c in out)
    assert len(srv.arrivals) == 60
    # The bucket holds a tenth of a second's share (2): no second sees more than 20 + 2 (+1 for timing).
    assert most_in_one_second(srv) <= 23
    # And the limit is used, not merely undercut: 60 requests at 20/s take about 3 s (slack for a busy machine).
    assert 2.5 <= elapsed <= 8.0


def test_without_limits_the_same_requests_arrive_together(tmp_path, scripted_server):
    # The control of the test above: the server would see the burst that rpm prevents.
    srv = counting_server(scripted_server)
    with Store(tmp_path) as store:
        ask(store, spec(srv.url), 60)
    assert most_in_one_second(srv) == 60


def test_each_endpoint_has_its_own_request_limit(tmp_path, scripted_server):
    a, b = counting_server(scripted_server), counting_server(scripted_server)
    with Store(tmp_path) as store:
        _, stats, elapsed = ask(store, spec([a.url, b.url], rpm=600), 40)
    assert stats.ok == 40 and len(a.arrivals) + len(b.arrivals) == 40
    # Two endpoints at 10/s each: 40 requests take about 2 s, and neither endpoint sees more than 10 + 1 a second.
    assert most_in_one_second(a) <= 12 and most_in_one_second(b) <= 12
    assert 1.5 <= elapsed <= 6.0


@pytest.mark.parametrize("used,tpm,n,fastest,slowest,most", [
    # Replies of 50 tokens (estimated 40 + ~3 before): 12000 a minute is 200 a second, so 16 requests (800 tokens)
    # take about 3 s, not an instant, and no second sees more than the bucket (200) and its refill (200) + one reply.
    (50, 12000, 16, 2.0, 8.0, 200 + 200 + 50),
    # Replies of 10 tokens: 1000 a minute (a bucket of 16.7); waiting on the estimates alone would pass one request
    # every 2.6 s (16 s in all), settling by usage one every 0.6 s.
    (10, 1000, 6, 0.0, 8.0, 17 + 17 + 10),
], ids=["usage-above-estimate", "usage-below-estimate"])
def test_tokens_per_minute_hold_with_the_usage_the_server_reports(tmp_path, scripted_server, used, tpm, n, fastest,
                                                                  slowest, most):
    srv = counting_server(scripted_server, usage_tokens=used)
    with Store(tmp_path) as store:
        _, stats, elapsed = ask(store, spec(srv.url, tpm=tpm), n)
    assert stats.ok == n and stats.tokens_in + stats.tokens_out == n * used
    assert most_in_one_second(srv, [used] * srv.requests) <= most
    assert fastest <= elapsed <= slowest


def test_a_request_larger_than_the_bucket_goes_and_leaves_a_debt():
    async def scenario():
        bucket = TokenBucket(rate=100.0, capacity=10.0)
        t0 = time.monotonic()
        await bucket.acquire(50)  # larger than the bucket: waits for a full one, then owes 40
        first = time.monotonic() - t0
        await bucket.acquire(10)  # waits out the debt (40) and its own 10: about 0.5 s
        return first, time.monotonic() - t0

    first, total = asyncio.run(scenario())
    assert first < 0.05
    assert 0.4 <= total <= 1.0


def test_a_refund_after_the_reply_lets_the_next_request_go_sooner():
    async def scenario():
        bucket = TokenBucket(rate=10.0, capacity=100.0)
        await bucket.acquire(100)
        bucket.adjust(+90)  # the reply used 10 of the 100 reserved
        t0 = time.monotonic()
        await bucket.acquire(80)
        return time.monotonic() - t0

    assert asyncio.run(scenario()) < 0.05


def test_a_refund_wakes_a_request_already_waiting():
    async def scenario():
        bucket = TokenBucket(rate=10.0, capacity=100.0)
        await bucket.acquire(100)
        t0 = time.monotonic()
        waiting = asyncio.ensure_future(bucket.acquire(50))  # would wait 5 s for the refill
        await asyncio.sleep(0.05)
        bucket.adjust(+90)  # a reply used far less than its estimate
        await waiting
        return time.monotonic() - t0

    assert asyncio.run(scenario()) < 0.5


@pytest.mark.parametrize("field,value", [("rpm", 0), ("tpm", -5)])
def test_a_limit_below_one_is_a_config_error_that_names_the_key(field, value):
    with pytest.raises(ConfigError, match=f"models.0.{field}"):
        validate_config({"models": [{"name": "a", "engine": "openai", "base_url": "http://x", field: value},
                                    {"name": "b", "engine": "llamacpp"}]},
                        RunConfig)


def test_endpoint_settings_on_an_in_process_engine_are_an_error():
    with pytest.raises(ConfigError, match="rpm, max_tokens_field apply to engine 'openai' only"):
        validate_config({"name": "a", "engine": "llamacpp", "rpm": 60, "max_tokens_field": "max_completion_tokens"},
                        ModelSpec)
