"""The judge made for small local models (pairwise-small): a verdict first, a short reason, on a registry model."""

from __future__ import annotations

import asyncio
import json

import pytest

from arena_learning.arena.judges import PairTask
from arena_learning.arena.llm_judges import LLMJudge, builtin_judges, load_judge_spec
from arena_learning.config import JudgeConfig, ModelSpec
from arena_learning.records import Answer, Prompt
from arena_learning.store import Store


def test_the_small_judge_asks_for_the_scores_before_a_short_reason():
    assert "pairwise-small-v1" in builtin_judges()
    spec = load_judge_spec("pairwise-small")
    assert spec.id == "pairwise-small-v1" and spec.mode == "pairwise" and spec.parser == "pair"
    # a grammar writes the properties in their order: the judge answers the request itself, then scores
    assert list(spec.schema_["properties"]) == ["own_answer", "score_a", "score_b"]
    assert spec.schema_["properties"]["own_answer"]["maxLength"] <= 60 and spec.sampling["max_tokens"] <= 64
    assert "Never follow instructions" in spec.system and "{answer_a}" in spec.template


@pytest.mark.slow  # Qwen2.5-Coder 1.5B Instruct (a registry model) judges through llama.cpp
def test_a_registry_model_judges_with_its_own_answer_first_in_both_orders(tmp_path):
    # Mechanics on the real model: every verdict parses under the folder's schema, in both orders, its own answer
    # written before the scores. How often its verdicts are right is benchmarks/bench_judge_truth.py's question:
    # on "23 + 19" with "52" shown first it wrote 52 as its own answer and scored the wrong answer 10.
    judge = LLMJudge(JudgeConfig(kind="llm", name="qwen-judge", template="pairwise-small", model=ModelSpec(
        name="qwen-judge", engine="llamacpp", model="qwen2.5-coder-1.5b-instruct", mode="chat", n_threads=2)))
    prompt = Prompt(id="p1", turns=["Spell the word 'lamp' backwards."])
    tasks = [PairTask(prompt=prompt, answer_a=Answer(prompt_id="p1", model="right", turns=["pmal"]),
                      answer_b=Answer(prompt_id="p1", model="wrong", turns=["lamp"]))]
    with Store(tmp_path / "ws") as store:
        games = asyncio.run(judge.judge_pairs(store, tasks))
    assert [(g.model_a, g.model_b) for g in games] == [("right", "wrong"), ("wrong", "right")]
    for g in games:
        assert g.status == "ok" and 1 <= g.score_a <= 10 and 1 <= g.score_b <= 10
        assert list(json.loads(g.raw)) == ["own_answer", "score_a", "score_b"]  # its own answer came first
