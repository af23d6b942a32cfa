"""Reasoning models: thinking is kept apart from the answer, never judged, never harvested; max_completion_tokens.

A real endpoint on 127.0.0.1 answers as reasoning models do (``reasoning_content``, inline ``<think>``
blocks, a block the chat template opened); a second one plays the judge and records what it is shown.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from arena_learning.arena.answers import answer_prompts
from arena_learning.arena.judges import PairTask
from arena_learning.arena.llm_judges import LLMJudge
from arena_learning.config import JudgeConfig, ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.base import Completion, Engine, Request
from arena_learning.engines.calls import CallStats, request_key, run_requests
from arena_learning.engines.reasoning import split_reasoning, split_think
from arena_learning.engines.server import make_app
from arena_learning.flywheel.harvest import harvest_sft
from arena_learning.records import Battle, Prompt
from arena_learning.store import Store, call_key

from .conftest import Reply, ThreadServer

SECRET = "SECRET-THOUGHT"


def reasoning_reply(body: dict) -> str | Reply:
    """Reply by the last user message: 'field' (reasoning_content), 'inline', 'opened', 'cutoff', else plain."""
    q = body["messages"][-1]["content"]
    if q.startswith("field"):
        return Reply("The answer is 4.", message={"reasoning_content": f"{SECRET}-1: two and two make four"},
                     usage_extra={"completion_tokens_details": {"reasoning_tokens": 30}})
    if q.startswith("inline"):
        return f"<think>\n{SECRET}-2: the capital is Paris\n</think>\n\nParis."
    if q.startswith("opened"):
        return f"{SECRET}-3: the sky scatters blue light</think>\n\nBlue."
    if q.startswith("cutoff"):
        return Reply(f"<think>{SECRET}-4: still thinking and thinking", finish="length")
    return f"plain answer to {q}"


@pytest.fixture
def servers(scripted_server):
    """A reasoning model's endpoint, and a judge's that prefers the second answer; both keep what they are sent."""
    judge = Reply(json.dumps({"explanation": "B is better", "score_a": 3, "score_b": 8}), usage=(50, 20))
    return scripted_server(reasoning_reply, usage=(5, 40)), scripted_server(judge)


def spec(url, name="reasoner", **kw):
    return ModelSpec(name=name, engine="openai", model=name, base_url=url, max_retries=0,
                     params={"max_tokens": 64}, **kw)


@pytest.mark.parametrize("text,answer,reasoning", [
    ("plain", "plain", ""),
    ("<think>a</think>b", "b", "a"),
    ("  <think>\na\n</think>\n\nb ", "b", "a"),
    ("a</think>b", "b", "a"),  # the template wrote the opening tag
    ("<think>a</think>b<think>c</think>d", "bd", "a\n\nc"),
    ("<think>a never closed", "", "a never closed"),
])
def test_think_blocks_are_split_from_the_answer(text, answer, reasoning):
    assert split_think(text) == (answer, reasoning)


def test_reasoning_tokens_are_estimated_by_characters_when_the_server_gives_no_count():
    comp = split_reasoning(Completion(text="<think>" + "x" * 30 + "</think>" + "y" * 10, tokens_out=40))
    assert (comp.text, comp.reasoning, comp.reasoning_tokens) == ("y" * 10, "x" * 30, 30)
    # A count from the server wins; a completion without reasoning is left alone.
    assert split_reasoning(Completion(text="a", reasoning="r", reasoning_tokens=7, tokens_out=9)).reasoning_tokens == 7
    plain = Completion(text="a", tokens_out=3)
    assert split_reasoning(plain) is plain


def test_reasoning_is_stored_apart_and_never_reaches_the_judge_nor_the_harvest(servers, tmp_path):
    rsrv, jsrv = servers
    prompts = [Prompt(id="p1", turns=["field: 2+2?", "inline: capital of France?"]),
               Prompt(id="p2", turns=["opened: colour of the sky?"]),
               Prompt(id="p3", turns=["cutoff: a long one"])]
    with Store(tmp_path) as store:
        result = asyncio.run(answer_prompts(store, "reasoner", build_engine(spec(rsrv.url)), prompts))
        plain = asyncio.run(answer_prompts(store, "plain", build_engine(spec(rsrv.url, name="plain")),
                                           [Prompt(id="p1", turns=["a", "b"]), Prompt(id="p2", turns=["c"])]))
        by_id = {a.prompt_id: a for a in result.answers}
        assert by_id["p1"].turns == ["The answer is 4.", "Paris."]
        assert by_id["p1"].reasoning == [f"{SECRET}-1: two and two make four", f"{SECRET}-2: the capital is Paris"]
        assert by_id["p2"].turns == ["Blue."] and by_id["p2"].reasoning == [f"{SECRET}-3: the sky scatters blue light"]
        # Counted: the server's count for the field, a share by characters for the inline block.
        inline = len(f"{SECRET}-2: the capital is Paris")
        assert by_id["p1"].reasoning_tokens == 30 + round(40 * inline / (inline + len("Paris.")))
        assert by_id["p1"].tokens_out == 80
        # All thinking and no answer (cut off): a failed call, with an error that says so.
        assert result.incomplete == ["p3"]
        error = store.db.execute("SELECT error FROM calls WHERE status='error'").fetchone()[0]
        assert "no answer after" in error and "characters of reasoning" in error and SECRET not in error
        # Stored apart: the answer record keeps it; a model without reasoning has none.
        stored = {a.prompt_id: a for a in store.get_answers("reasoner")}
        assert stored["p1"].reasoning == by_id["p1"].reasoning
        assert all(a.reasoning == [] and a.reasoning_tokens == 0 for a in plain.answers)
        # The second turn's conversation carried the first answer, not the thinking.
        second_turn = [b for b in rsrv.bodies if b["messages"][-1]["content"].startswith("inline")]
        assert second_turn and second_turn[0]["messages"][1] == {"role": "assistant", "content": "The answer is 4."}

        judge = LLMJudge(JudgeConfig(kind="llm", name="j", model=spec(jsrv.url, name="judge")))
        plain_by_id = {a.prompt_id: a for a in plain.answers}
        tasks = [PairTask(prompt=p, answer_a=plain_by_id[p.id], answer_b=by_id[p.id]) for p in prompts[:2]]
        judgments = asyncio.run(judge.judge_pairs(store, tasks))
        assert len(judgments) == 4 and all(j.status == "ok" for j in judgments)  # both orders
        shown = json.dumps(jsrv.bodies)
        assert len(jsrv.bodies) == 6  # p1 has two turns, p2 one; each in both orders
        assert "The answer is 4." in shown and "Paris." in shown and "Blue." in shown
        assert SECRET not in shown

        battles = [Battle(prompt_id=p, model_a="plain", model_b="reasoner", outcome="model_b", score_a=3.0,
                          score_b=8.0, score_gap=5.0) for p in ("p1", "p2")]
        sft = harvest_sft(prompts[:2], plain.answers + result.answers, battles, target="plain",
                          references=["reasoner"])
        assert len(sft) == 2
        harvested = json.dumps([item.messages for item in sft])
        assert "Paris." in harvested and "Blue." in harvested and SECRET not in harvested


def test_a_think_block_in_an_older_ledger_answer_is_split_when_read(tmp_path):
    engine = build_engine(spec("http://127.0.0.1:9/v1"))  # nothing listens: every answer must come from the ledger
    req = Request(messages=[{"role": "user", "content": "q"}])
    with Store(tmp_path) as store:
        store.record_calls([{"key": request_key(engine, req), "engine": "openai", "model": "reasoner",
                             "request": {}, "status": "ok",
                             "response": {"text": "<think>old thought</think>old answer", "tokens_out": 10}}])
        stats = CallStats()
        (comp,) = run_requests(store, engine, [req], stats=stats, show_progress=False)
    assert (comp.text, comp.reasoning, stats.cached, stats.sent) == ("old answer", "old thought", 1, 0)


def test_max_completion_tokens_is_sent_instead_of_max_tokens_and_changes_the_key(servers, tmp_path):
    rsrv, _ = servers
    new = build_engine(spec(rsrv.url, max_tokens_field="max_completion_tokens"))
    old = build_engine(spec(rsrv.url))
    req = Request(messages=[{"role": "user", "content": "field"}])
    with Store(tmp_path) as store:
        run_requests(store, new, [req], show_progress=False)
    (body,) = rsrv.bodies
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body
    assert request_key(new, req) != request_key(old, req)
    # The default keeps the key every existing workspace holds: params, chat format, payload as before.
    params = {**old.spec.params.model_dump(), "chat": None}
    assert request_key(old, req) == call_key("openai", "reasoner", params, {"messages": req.messages})


class _Echo(Engine):
    """Answers with the max_tokens it was given (for the server's request parsing)."""

    kind = "echo"

    async def complete(self, request: Request) -> Completion:
        return Completion(text=f"max_tokens={request.params.get('max_tokens')}", tokens_out=1)


def test_arena_serve_reads_max_completion_tokens_as_max_tokens(tmp_path):
    srv = ThreadServer(make_app("echo", _Echo(ModelSpec(name="echo", engine="llamacpp"))))
    try:
        engine = build_engine(ModelSpec(name="c", engine="openai", model="echo", base_url=srv.url,
                                        max_tokens_field="max_completion_tokens", params={"max_tokens": 7}))
        with Store(tmp_path) as store:
            (comp,) = run_requests(store, engine, [Request(messages=[{"role": "user", "content": "hi"}])],
                                   show_progress=False)
        assert comp.text == "max_tokens=7"
    finally:
        srv.close()


def test_imported_answers_keep_their_think_blocks_apart(tmp_path):
    from arena_learning.arena.imports import read_answers

    path = tmp_path / "model_answer.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": 81, "model_id": "r1", "choices": [{"turns": [f"<think>{SECRET}</think>\n\nA blog post.",
                                                                    "A rewrite."]}]},
        {"question_id": 82, "model_id": "r1", "choices": [{"turns": ["An email."]}]},
    ]) + "\n", encoding="utf-8")
    report = read_answers([path])
    first, second = report.answers
    assert first.turns == ["A blog post.", "A rewrite."] and first.reasoning == [SECRET, ""]
    assert second.turns == ["An email."] and second.reasoning == []
