"""Answers: every contestant answers every prompt, turn by turn.

A multi-turn prompt is answered one turn at a time: the request for turn t
carries the user turns 1..t and the model's own answers to turns 1..t-1. All
prompts' turn t go out together, so the engine stays busy and the ledger caches
each turn separately (a killed run resumes mid-conversation).

A turn that came back empty is a failed call (see ``engines.calls``): the
prompt is incomplete and gets no answer. A turn cut off at max_tokens is kept
and counted in ``Answer.truncated`` (and in the stage's ``CallStats.truncated``).

The model's ``system_prompt`` opens every conversation, and ``params_by_category``
sets the sampling of each prompt's category (both enter the ledger key through the
request, so changing them asks again). A reasoning model's thinking is kept in
``Answer.reasoning``; the next turn's conversation carries only its answers.

A model with ``vote`` sends k seeded samples for each turn (``turn_requests``) and keeps one
(``arena.vote``: majority, or best_of_k by the verifier); the answer's tokens and latency are those of
all its samples (what it cost), its text, cut-off count and reasoning those of the kept one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ModelSpec
from ..engines.base import Completion, Engine, Request
from ..engines.calls import CallStats, arun_requests
from ..errors import ArenaError
from ..progress import Track
from ..records import Answer, Prompt
from ..store import DEFAULT_SET, Store
from .vote import choose, missing_references, needs_reference


@dataclass
class AnswerResult:
    answers: list[Answer]
    incomplete: list[str]  # prompt ids with a failed turn: no answer is stored for them
    stats: CallStats


def conversation(prompt: Prompt, replies: Sequence[str], upto: int, system: str | None = None
                 ) -> list[dict[str, str]]:
    """Return the messages for turn ``upto`` (0-based): user turns with the model's earlier replies, after the
    ``system`` message if any."""
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    for t in range(upto + 1):
        messages.append({"role": "user", "content": prompt.turns[t]})
        if t < upto:
            messages.append({"role": "assistant", "content": replies[t]})
    return messages


def category_params(spec: ModelSpec, prompt: Prompt) -> dict[str, Any]:
    """Return the sampling settings ``spec`` sets for ``prompt``'s category (empty: the model's own params)."""
    if not spec.params_by_category or not prompt.category:
        return {}
    chosen = spec.params_by_category.get(prompt.category.lower())
    return chosen.model_dump(exclude_none=True) if chosen is not None else {}


def turn_requests(spec: ModelSpec, prompt: Prompt, replies: Sequence[str], turn: int) -> list[Request]:
    """Return the requests that answer ``turn`` of ``prompt``: one, or the k seeded samples of ``spec.vote``."""
    messages = conversation(prompt, replies, turn, spec.system_prompt)
    params = category_params(spec, prompt)
    if spec.vote is None:
        return [Request(messages=messages, params=params)]
    vote = spec.vote
    return [Request(messages=messages, params={**params, "temperature": vote.temperature, "seed": vote.seed + i})
            for i in range(vote.k)]


def pick(spec: ModelSpec, prompt: Prompt, replies: Sequence[str], turn: int,
         samples: Sequence[Completion | None]) -> Completion | None:
    """Return the completion that answers ``turn``: the one sample, or the one ``spec.vote`` keeps of those that
    came back (None: none did)."""
    if spec.vote is None:
        return samples[0]
    came = [c for c in samples if c is not None]
    if not came:
        return None
    return came[choose(spec.vote, prompt, replies, turn, [c.text for c in came])]


async def answer_prompts(
    store: Store, model_name: str, engine: Engine, prompts: Sequence[Prompt], *, progress: Track | None = None,
    set_name: str = DEFAULT_SET,
) -> AnswerResult:
    """Return the model's answers to ``prompts`` (stored under ``set_name``); prompts whose turns failed are
    listed, not answered."""
    stats = CallStats()
    replies: dict[str, list[str]] = {p.id: [] for p in prompts}
    # tokens in, out, latency, truncated, reasoning tokens
    usage: dict[str, list[float]] = {p.id: [0, 0, 0.0, 0, 0] for p in prompts}
    thoughts: dict[str, list[str]] = {p.id: [] for p in prompts}
    spec = engine.spec
    if needs_reference(spec.vote):
        lacking = missing_references(prompts)
        if lacking:
            raise ArenaError(f"model {model_name!r}: vote.method best_of_k picks samples against reference answers, "
                             f"and {len(lacking)} prompts have none (first: {lacking[0]}); use the task suite's "
                             f"prompts, or vote.method 'majority'")
    alive = list(prompts)
    failed: list[str] = []
    turn = 0
    while alive:
        batch = [p for p in alive if len(p.turns) > turn]
        if not batch:
            break
        per_prompt = [turn_requests(spec, p, replies[p.id], turn) for p in batch]
        requests = [r for rs in per_prompt for r in rs]
        label = f"answer {model_name}" + (f" (turn {turn + 1})" if turn else "")
        results = await arun_requests(store, engine, requests, label=label, stats=stats, progress=progress)
        alive = []
        at = 0
        for p, rs in zip(batch, per_prompt):
            samples, at = results[at: at + len(rs)], at + len(rs)
            comp = pick(spec, p, replies[p.id], turn, samples)
            if comp is None:
                failed.append(p.id)
                continue
            replies[p.id].append(comp.text)
            thoughts[p.id].append(comp.reasoning)
            u = usage[p.id]
            for c in samples:  # what the turn cost: every sample that came back
                if c is not None:
                    u[0] += c.tokens_in
                    u[1] += c.tokens_out
                    u[2] += c.latency_s
                    u[4] += c.reasoning_tokens
            u[3] += comp.finish_reason == "length"
            alive.append(p)
        turn += 1
    failed_set = set(failed)
    answers = [
        Answer(
            prompt_id=p.id,
            model=model_name,
            turns=replies[p.id],
            tokens_in=int(usage[p.id][0]),
            tokens_out=int(usage[p.id][1]),
            latency_s=usage[p.id][2],
            truncated=int(usage[p.id][3]),
            reasoning=thoughts[p.id] if any(thoughts[p.id]) else [],
            reasoning_tokens=int(usage[p.id][4]),
        )
        for p in prompts
        if p.id not in failed_set
    ]
    store.put_answers(answers, set_name)
    # An answer from an earlier run (other settings) must not stand in for one that failed now.
    store.delete_answers(model_name, failed, set_name)
    return AnswerResult(answers=answers, incomplete=failed, stats=stats)
