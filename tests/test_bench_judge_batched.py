"""benchmarks/bench_judge_batched.py replays a judge's own requests: rebuilt from the ledger, each asks exactly what
the judge asked (the same ledger key), one at a time and batched alike.

The timed replays themselves are minutes of Qwen 1.5B, run by hand (figures in docs/results.md and docs/models.md).
"""

from __future__ import annotations

import asyncio

import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.base import Request
from arena_learning.engines.calls import arun_requests, request_key
from arena_learning.store import Store

from .conftest import load_benchmark

SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}


@pytest.mark.slow  # loads the bundled model
def test_the_replayed_requests_are_the_judges_own(tmp_path):
    bench = load_benchmark("bench_judge_batched")
    spec = ModelSpec(name="judge", engine="llamacpp", model="bundled", mode="chat", chat_format="gemma", n_threads=1,
                     params={"max_tokens": 12, "temperature": 0.0})
    engine = build_engine(spec)
    asked = [Request(messages=[{"role": "user", "content": f"Score {i} from 1 to 10."}],
                     params={"json_schema": SCHEMA} if i % 2 else {}) for i in range(4)]
    with Store(tmp_path / "ws") as store:
        asyncio.run(arun_requests(store, engine, asked))
    replayed = bench.judge_requests(tmp_path / "ws", "judge", 10)
    assert sorted(request_key(engine, r) for r in replayed) == sorted(request_key(engine, r) for r in asked)
    one_at_a_time = build_engine(spec.model_copy(update={"parallel": 1}))
    assert {request_key(one_at_a_time, r) for r in replayed} == {request_key(one_at_a_time, r) for r in asked}
    first = bench.judge_requests(tmp_path / "ws", "judge", 2)  # the limit keeps the first ones
    assert [(r.payload(), r.params) for r in first] == [(r.payload(), r.params) for r in replayed[:2]]


def test_a_verdicts_score_is_read_from_json_or_its_first_number():
    bench = load_benchmark("bench_judge_batched")
    assert bench.score('{"score": 7, "why": "ok"}') == 7
    assert bench.score('{"winner": "A"}') == "A"
    assert bench.score("Verdict: 8 of 10") == "8"
    assert bench.score(None) is None
