"""engine: anthropic through the official SDK against a local stand-in for `POST /v1/messages` on 127.0.0.1 that
checks requests as the API does (headers, max_tokens, a system string, turns that alternate from a user turn) and
answers in the API's shape: answers, usage and spend in the ledger, retries, failures, a judge's verdicts."""

from __future__ import annotations

import asyncio

import anthropic  # noqa: F401 - in the `all` extra that `make` installs: its absence fails, never skips
import pytest

from arena_learning import pipeline
from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.anthropic_engine import AnthropicEngine
from arena_learning.engines.base import Request
from arena_learning.engines.calls import CallStats, arun_requests
from arena_learning.errors import ConfigError, EngineError
from arena_learning.store import Store

from .anthropic_server import MessagesServer
from .conftest import Reply
from .test_judge_runs import config as judge_config
from .test_judge_runs import scripted_judge
from .test_judge_runs import workspace as judge_workspace


def spec(server: MessagesServer, **extra) -> ModelSpec:
    return ModelSpec.model_validate({"name": "claude", "engine": "anthropic", "model": "claude-test",
                                     "base_url": server.base_url, "price_in": 3.0, "price_out": 15.0,
                                     "max_retries": 2, **extra})


def run(store: Store, engine, requests, stats: CallStats | None = None):
    return asyncio.run(arun_requests(store, engine, requests, stats=stats))


def test_a_conversation_is_sent_as_the_messages_api_takes_it_and_its_usage_priced_in_the_ledger(tmp_path,
                                                                                                 messages_server):
    server = messages_server(lambda body: Reply("Paris.", usage=(31, 4)))
    engine = build_engine(spec(server, params={"max_tokens": 64, "temperature": 0.2, "stop": ["\n\n"]}))
    assert isinstance(engine, AnthropicEngine)
    convo = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"},
             {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Italy?"}]
    stats = CallStats()
    with Store(tmp_path / "ws") as store:
        (comp,) = run(store, engine, [Request(messages=convo)], stats)
        (body,) = server.bodies
        assert body.pop("temperature") == 0.2  # on the wire as the API has always taken it
        assert body == {"model": "claude-test", "max_tokens": 64, "system": "Answer briefly.",
                        "stop_sequences": ["\n\n"], "messages": convo[1:]}
        assert server.headers[0]["authorization"] == "Bearer unused" and server.headers[0]["anthropic-version"]
        assert (comp.text, comp.tokens_in, comp.tokens_out, comp.finish_reason) == ("Paris.", 31, 4, "stop")
        assert store.spent_usd() == pytest.approx((31 * 3.0 + 4 * 15.0) / 1e6)
        assert store.spend_rows()[0]["model"] == "claude"
        # served from the ledger the second time: the stand-in hears nothing more
        run(store, build_engine(engine.spec), [Request(messages=convo)])
        assert len(server.bodies) == 1 and stats.tokens_in == 31
        # temperature 1.0 (the API's default) and top_p 1.0 are not sent: for models that take no sampling settings
        default = build_engine(spec(server, params={"max_tokens": 8, "temperature": 1.0}))
        run(store, default, [Request(messages=convo[1:2])])
        assert "temperature" not in server.bodies[-1] and "top_p" not in server.bodies[-1]



def test_overloaded_is_retried_by_the_sdk_refusals_fail_the_call_and_max_tokens_is_a_cut_off(tmp_path,
                                                                                            messages_server):
    def script(body):
        user = body["messages"][-1]["content"]
        if "BUSY" in user and sum("BUSY" in b["messages"][-1]["content"] for b in server.bodies) == 1:
            return Reply(status=529, error="Overloaded")
        return Reply("a long answer that", finish="length", usage=(5, 8)) if "LONG" in user else "ok"

    server = messages_server(script)
    engine = build_engine(spec(server))
    stats = CallStats()
    requests = [Request(messages=[{"role": "user", "content": "BUSY now"}]),
                Request(messages=[{"role": "user", "content": "LONG please"}]),
                Request(messages=[{"role": "assistant", "content": "I start"}])]  # the API refuses it: 400
    with Store(tmp_path / "ws") as store:
        busy, long, refused = run(store, engine, requests, stats)
        assert busy is not None and busy.text == "ok"
        assert long is not None and long.finish_reason == "length" and stats.truncated == 1
        assert refused is None and stats.failed == 1 and "HTTP 400" in stats.errors[0]
        assert "first message must use the user role" in stats.errors[0]
        assert store.call_counts() == {"ok": 2, "error": 1}  # the failure is retried on the next run
    assert sum("BUSY" in b["messages"][-1]["content"] for b in server.bodies) == 2


def test_an_anthropic_judge_plays_its_games_and_its_spend_is_the_servers_usage(tmp_path, messages_server):
    server = messages_server(scripted_judge)
    store = judge_workspace(tmp_path)
    cfg = judge_config("http://127.0.0.1:1/v1")
    judge = cfg.judge.model_copy(update={"model": spec(server, name="judge", price_in=1.0, price_out=2.0,
                                                       params={"max_tokens": 128})})
    cfg = cfg.model_copy(update={"judge": judge})
    report = pipeline.stage_battle(cfg, store, prompts=pipeline.stage_prompts(cfg, store), show_progress=False)
    assert report.stats["parsed"] == 6 and report.stats["failed"] == 2  # as the OpenAI-compatible judge's
    assert {b.prompt_id for b in report.battles} == {"p1", "p2", "p4"}
    assert all(b.outcome == "model_a" if b.model_a == "good-model" else "model_b" for b in report.battles)
    usage = [scripted_judge(b).usage for b in server.bodies]
    assert store.spent_usd() == pytest.approx(sum(i * 1.0 + o * 2.0 for i, o in usage) / 1e6, rel=0.01)
    store.close()


def test_the_config_and_the_engine_say_what_an_anthropic_model_needs(monkeypatch):
    with pytest.raises(ConfigError, match="takes chat messages"):
        from arena_learning.config import validate_config

        validate_config({"name": "c", "engine": "anthropic", "mode": "completion"}, ModelSpec)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(EngineError, match="ANTHROPIC_API_KEY is not set"):
        build_engine(ModelSpec(name="c", engine="anthropic", model="claude-x"))  # the hosted API needs its key
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert build_engine(ModelSpec(name="c", engine="anthropic", model="claude-x")).api_key == "sk-test"
    hosted = ModelSpec(name="c", engine="anthropic", model="claude-x")
    assert hosted.batch_price == 0.5
