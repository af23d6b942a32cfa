"""The answer stage through a real HTTP endpoint on 127.0.0.1."""

from __future__ import annotations

import asyncio

from arena_learning.arena.answers import answer_prompts
from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.records import Answer, Prompt
from arena_learning.store import Store

from .conftest import http_error


def test_a_failed_turn_removes_the_stale_answer_of_an_earlier_run(tmp_path, scripted_server):
    def reply(body):
        last = body["messages"][-1]["content"]
        return http_error(400, "no") if "fails" in last else f"re: {last}"

    srv = scripted_server(reply)
    prompts = [Prompt(id="ok", turns=["hello", "again"]), Prompt(id="bad", turns=["this one", "fails"])]
    with Store(tmp_path) as store:
        store.put_answers([Answer(prompt_id="bad", model="m", turns=["old", "old"])])
        engine = build_engine(ModelSpec(name="m", engine="openai", model="m", base_url=srv.url))
        result = asyncio.run(answer_prompts(store, "m", engine, prompts))
        assert result.incomplete == ["bad"]
        assert [(a.prompt_id, a.turns) for a in store.get_answers("m")] == [("ok", ["re: hello", "re: again"])]
