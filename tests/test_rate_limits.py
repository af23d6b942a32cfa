"""Requests and tokens per minute per endpoint, against a real server on 127.0.0.1.

Checked on the limiter's own clock (every span of the sends, the least time the tokens need) and by event order
(what goes without waiting), never by a window of seconds a busy machine could miss."""

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


@pytest.fixture
def sends(monkeypatch):
    """Record every request as its endpoint's limits let it go: (the EndpointLimits, the request bucket's own clock
    at that moment, or time.monotonic() without one; the tokens charged). The real limits do the waiting."""
    from arena_learning.engines.ratelimit import EndpointLimits

    got: list[tuple[EndpointLimits, float, float]] = []
    real = EndpointLimits.acquire

    async def acquire(self, tokens):
        taken = await real(self, tokens)
        got.append((self, self.requests.stamp if self.requests is not None else time.monotonic(), taken))
        return taken

    monkeypatch.setattr(EndpointLimits, "acquire", acquire)
    return got


def excess(stamps: list[float], rate: float, capacity: float) -> float:
    """Return the most that any run of consecutive sends exceeds what a bucket lets through over its span
    (``capacity`` + ``rate`` x span); at most 0 where the limit held."""
    t = sorted(stamps)
    return max((j - i + 1) - capacity - rate * (t[j] - t[i]) for i in range(len(t)) for j in range(i, len(t)))


def by_endpoint(sends) -> list[list[float]]:
    groups: dict[int, list[float]] = {}
    for limits, stamp, _ in sends:
        groups.setdefault(id(limits), []).append(stamp)
    return list(groups.values())


def spec(url, **kw) -> ModelSpec:
    return ModelSpec(name="remote", engine="openai", model="m", base_url=url, concurrency=64, max_retries=0,
                     params={"max_tokens": 40}, **kw)


def ask(store, model_spec, n, prefix="q"):
    stats = CallStats()
    start = time.monotonic()
    out = run_requests(store, build_engine(model_spec), [Request(messages=[{"role": "user", "content": f"{prefix}{i}"}])
                                                         for i in range(n)], stats=stats, show_progress=False)
    return out, stats, time.monotonic() - start


def test_requests_per_minute_hold_over_every_span_and_the_limit_is_used(tmp_path, scripted_server, sends):
    srv = counting_server(scripted_server)
    with Store(tmp_path) as store:
        # 1200 per minute is 20 per second; 60 requests at concurrency 64 would otherwise go at once.
        out, stats, _ = ask(store, spec(srv.url, rpm=1200), 60)
    assert stats.ok == 60 and all(c is not None for c in out) and len(srv.arrivals) == 60
    (stamps,) = by_endpoint(sends)
    # The bucket holds a tenth of a second's share (2): over any span, at most 2 + 20 a second went (on the bucket's
    # clock, so however busy the machine).
    assert excess(stamps, 20.0, 2.0) <= 1e-9
    # And the limit is used, not merely undercut: past the first 2, the requests went at more than half of 20 a second.
    assert (60 - 2) / (max(stamps) - min(stamps)) > 20.0 / 2


def test_without_limits_the_same_requests_go_faster_than_the_limit(tmp_path, scripted_server, sends):
    # The control of the test above: without rpm the requests go faster than 1200 a minute would let them.
    srv = counting_server(scripted_server)
    with Store(tmp_path) as store:
        ask(store, spec(srv.url), 60)
    assert len(srv.arrivals) == 60
    (stamps,) = by_endpoint(sends)
    assert excess(stamps, 20.0, 2.0) > 1


def test_each_endpoint_has_its_own_request_limit(tmp_path, scripted_server, sends):
    a, b = counting_server(scripted_server), counting_server(scripted_server)
    with Store(tmp_path) as store:
        _, stats, _ = ask(store, spec([a.url, b.url], rpm=600), 40)
    assert stats.ok == 40 and len(a.arrivals) + len(b.arrivals) == 40
    # Two endpoints at 10 a second each (a bucket of 1): each holds its own limit over any span ...
    per_endpoint = by_endpoint(sends)
    assert len(per_endpoint) == 2 and sum(map(len, per_endpoint)) == 40
    assert all(excess(stamps, 10.0, 1.0) <= 1e-9 for stamps in per_endpoint)
    # ... and together they went faster than one endpoint's limit allows: two buckets, not one shared.
    assert excess([t for stamps in per_endpoint for t in stamps], 10.0, 1.0) > 1


@pytest.mark.parametrize("used,tpm,n", [
    # Replies of 50 tokens (estimated 43 before): 12000 a minute is 200 a second, so 16 requests (800 tokens)
    # take about 3 s, not an instant.
    (50, 12000, 16),
    # Replies of 10 tokens: 1000 a minute (a bucket of 16.7); waiting on the estimates alone would pass one request
    # every 2.6 s (13 s in all), settling by usage one every 0.6 s.
    (10, 1000, 6),
], ids=["usage-above-estimate", "usage-below-estimate"])
def test_tokens_per_minute_hold_with_the_usage_the_server_reports(tmp_path, scripted_server, sends, used, tpm, n):
    srv = counting_server(scripted_server, usage_tokens=used)
    with Store(tmp_path) as store:
        _, stats, elapsed = ask(store, spec(srv.url, tpm=tpm), n)
    assert stats.ok == n and stats.tokens_in + stats.tokens_out == n * used
    rate = capacity = tpm / 60
    charged = [taken for _, _, taken in sends]  # each request's estimate, in the order they went
    estimate = min(charged)
    assert len(charged) == n

    def least_time(per_request: float) -> float:
        """The least time a full bucket lets the n requests go in, each but the last costing ``per_request``."""
        return ((n - 1) * per_request + min(charged[-1], capacity) - capacity) / rate

    # The limit holds: before the last request went, the bucket had supplied what the others cost (their estimate
    # until their reply settled it, their usage after: at least the smaller of the two) ...
    assert elapsed >= least_time(min(used, estimate))
    # ... and is used, settled by the usage the server reports: within twice the least time that usage needs,
    if used < estimate:  # which is less than settling by the estimates alone could take
        assert 2 * least_time(used) < least_time(estimate)
    assert elapsed < 2 * least_time(used), (elapsed, least_time(used))


def test_a_request_larger_than_the_bucket_goes_and_leaves_a_debt():
    async def scenario():
        bucket = TokenBucket(rate=100.0, capacity=10.0)
        first = asyncio.ensure_future(bucket.acquire(50))  # larger than the bucket: goes on a full one, owes 40
        await asyncio.sleep(0)  # one turn of the loop: it went without waiting
        went, debt, stamp = first.done(), bucket.level, bucket.stamp
        await bucket.acquire(10)  # waits out the debt (40) and its own 10
        return went, debt, bucket.stamp - stamp

    went, debt, waited = asyncio.run(scenario())
    assert went and debt == -40.0
    # on the bucket's own clock: the refill of 50 at 100 a second, and not twice that
    assert 0.5 - 1e-9 <= waited < 2 * 0.5


def test_a_refund_after_the_reply_lets_the_next_request_go_sooner():
    async def scenario():
        bucket = TokenBucket(rate=10.0, capacity=100.0)
        await bucket.acquire(100)
        bucket.adjust(+90)  # the reply used 10 of the 100 reserved
        nxt = asyncio.ensure_future(bucket.acquire(80))
        await asyncio.sleep(0)  # one turn of the loop: it went without waiting for the refill (8 s)
        return nxt.done()

    assert asyncio.run(scenario())


def test_a_refund_wakes_a_request_already_waiting():
    async def scenario():
        bucket = TokenBucket(rate=10.0, capacity=100.0)
        await bucket.acquire(100)
        waiting = asyncio.ensure_future(bucket.acquire(50))  # would wait 5 s for the refill
        await asyncio.sleep(0)
        waited = not waiting.done()
        bucket.adjust(+90)  # a reply used far less than its estimate
        done, _ = await asyncio.wait({waiting}, timeout=5.0 / 2)  # woken: not after the refill, nor half of it
        return waited, waiting in done

    assert asyncio.run(scenario()) == (True, True)


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
