"""Prompting as users configure it: a system prompt for contestants, sampling per prompt category (MT-Bench preset).

The contestant is an `openai` model talking to a real endpoint on 127.0.0.1 that records every request body.
"""

from __future__ import annotations

import asyncio

import pytest

from arena_learning.arena.answers import answer_prompts, category_params
from arena_learning.config import CATEGORY_PRESETS, ModelSpec, RunConfig, validate_config
from arena_learning.curate.ingest import ingest
from arena_learning.engines import build_engine
from arena_learning.engines.base import Request
from arena_learning.engines.calls import request_key
from arena_learning.errors import ConfigError
from arena_learning.records import Prompt
from arena_learning.store import Store

from .conftest import shared


@pytest.fixture
def recorder(scripted_server):
    """An endpoint that answers every request (chat or completion) and keeps its body."""
    return scripted_server("an answer", usage=(3, 2))


def spec(url, **kw):
    return ModelSpec(name="m", engine="openai", model="m", base_url=url, max_retries=0, **kw)


def answer(store, model_spec, prompts):
    return asyncio.run(answer_prompts(store, model_spec.name, build_engine(model_spec), prompts))


def test_a_chat_contestant_gets_its_system_prompt_before_every_turn(recorder, tmp_path):
    with Store(tmp_path) as store:
        result = answer(store, spec(recorder.url, system_prompt="You are terse."),
                        [Prompt(id="p", turns=["first?", "second?"])])
    assert result.answers[0].turns == ["an answer", "an answer"]
    first, second = recorder.bodies
    assert first["messages"] == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "first?"}]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][0]["content"] == "You are terse."


def test_without_a_system_prompt_the_request_and_its_ledger_key_are_as_before(recorder, tmp_path):
    with Store(tmp_path) as store:
        answer(store, spec(recorder.url), [Prompt(id="p", turns=["q?"])])
    assert recorder.bodies[0]["messages"] == [{"role": "user", "content": "q?"}]
    plain = build_engine(spec(recorder.url))
    prompted = build_engine(spec(recorder.url, system_prompt="Be kind."))
    req = Request(messages=[{"role": "user", "content": "q?"}])
    sys_req = Request(messages=[{"role": "system", "content": "Be kind."}, {"role": "user", "content": "q?"}])
    # The system prompt travels in the messages, so it changes the key only when it is set.
    assert request_key(plain, req) == request_key(prompted, req) != request_key(prompted, sys_req)


def test_in_completion_mode_the_system_prompt_replaces_the_formats_system(recorder, tmp_path):
    base = spec(recorder.url, mode="completion", system_prompt="Answer in one word.\n",
                prompt_format={"system": "Old preamble.\n"})
    with Store(tmp_path) as store:
        answer(store, base, [Prompt(id="p", turns=["Colour of grass?"])])
    prompt = recorder.bodies[0]["prompt"]
    assert prompt.startswith("Answer in one word.\nQuestion: Colour of grass?") and "Old preamble" not in prompt


def test_mt_bench_preset_samples_each_category_at_fastchats_temperature(recorder, tmp_path):
    prompts = ingest([shared("mt_bench", "question.jsonl")]).prompts
    assert len(prompts) == 80
    model = spec(recorder.url, params={"temperature": 0.3, "max_tokens": 32}, params_by_category="mt-bench")
    with Store(tmp_path) as store:
        result = answer(store, model, prompts)
    assert len(result.answers) == 80 and len(recorder.bodies) == 160
    category = {p.turns[0]: p.category for p in prompts}
    seen: dict[str, set[float]] = {}
    for body in recorder.bodies:
        seen.setdefault(category[body["messages"][0]["content"]], set()).add(body["temperature"])
        assert body["max_tokens"] == 32  # the preset sets temperature only
    assert seen == {"writing": {0.7}, "roleplay": {0.7}, "extraction": {0.0}, "math": {0.0}, "coding": {0.0},
                    "reasoning": {0.0}, "stem": {0.1}, "humanities": {0.1}}


def test_a_category_without_settings_keeps_the_models_params_and_its_old_key(recorder):
    model = spec(recorder.url, params={"temperature": 0.0}, params_by_category={"Writing": {"temperature": 0.9},
                                                                                "math": {"temperature": 0.0}})
    engine, plain = build_engine(model), build_engine(spec(recorder.url, params={"temperature": 0.0}))
    msgs = [{"role": "user", "content": "x"}]

    def key(category, eng=engine):
        p = Prompt(id="p", turns=["x"], category=category)
        return request_key(eng, Request(messages=msgs, params=category_params(eng.spec, p)))

    assert category_params(model, Prompt(id="p", turns=["x"], category="writing")) == {"temperature": 0.9}
    assert category_params(model, Prompt(id="p", turns=["x"], category="WRITING")) == {"temperature": 0.9}
    assert category_params(model, Prompt(id="p", turns=["x"], category="coding")) == {}
    assert category_params(model, Prompt(id="p", turns=["x"])) == {}
    # A setting equal to the model's own (math at 0.0) and no setting at all ask the ledger the same question.
    assert key("math") == key("coding") == key(None) == key(None, plain) != key("writing")


def test_the_preset_is_fastchats_table():
    assert {c: v["temperature"] for c, v in CATEGORY_PRESETS["mt-bench"].items()} == {
        "writing": 0.7, "roleplay": 0.7, "extraction": 0.0, "math": 0.0, "coding": 0.0, "reasoning": 0.0,
        "stem": 0.1, "humanities": 0.1}


def test_an_unknown_preset_or_setting_is_a_config_error_that_names_the_key():
    base = {"name": "m", "engine": "openai", "base_url": "http://127.0.0.1:1/v1"}
    with pytest.raises(ConfigError, match=r"models.0.params_by_category: .*unknown preset 'mt_bench'.*mt-bench"):
        validate_config({"models": [{**base, "params_by_category": "mt_bench"}, {**base, "name": "n"}]}, RunConfig)
    with pytest.raises(ConfigError, match=r"params_by_category.writing.temprature: unknown key"):
        validate_config({**base, "params_by_category": {"writing": {"temprature": 0.7}}}, ModelSpec)


def test_a_system_prompt_on_a_chat_format_that_drops_it_is_an_error():
    with pytest.raises(ConfigError, match="'gemma' chat format drops system messages"):
        validate_config({"name": "m", "engine": "llamacpp", "chat_format": "gemma", "system_prompt": "Be brief."},
                        ModelSpec)
