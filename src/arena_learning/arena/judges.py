"""Judges score the two answers of a pair and give the game's verdict, all through one interface.

A judge is config behind the :class:`Judge` protocol (AlpacaEval's lesson): the stages build one
from the run's ``judge`` section and call ``await judge.judge_pairs(store, tasks, progress)``,
whatever it is. The verifier (here) checks each answer against the prompt's reference with the
task suite's checkers (0-10), needs no model and ignores the store; the LLM judges and panels
(:mod:`arena_learning.arena.llm_judges`) make their calls through the store's ledger.
``call_stats`` gives what the calls cost, by judge name, for the reports.

A stage that judges in several batches (the games, then the canaries; the adaptive schedule's
rounds) runs them all inside one :func:`judge_session`: one event loop, and each judge engine's
connections (an HTTP session) opened once and closed at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..records import Answer, Judgment, Outcome, Prompt
from ..tasks import check_turns

if TYPE_CHECKING:
    from ..engines.base import Engine
    from ..progress import Track
    from ..store import Store

T = TypeVar("T")


def verdict(score_a: float, score_b: float, tie_threshold: float = 0.0) -> Outcome:
    """Return the outcome of two scores: a tie when the gap is at most ``tie_threshold``."""
    if abs(score_a - score_b) <= tie_threshold:
        return "tie"
    return "model_a" if score_a > score_b else "model_b"


@dataclass
class PairTask:
    """One game to judge: a prompt and two answers in the order shown."""

    prompt: Prompt
    answer_a: Answer
    answer_b: Answer


class Judge(Protocol):
    """What every judge is to the stages: a name, one asynchronous call from games to judgments, its costs."""

    name: str

    async def judge_pairs(self, store: Store, tasks: Sequence[PairTask],
                          progress: Track | None = None) -> list[Judgment]:
        """Return the judgments of ``tasks`` (a panel: its members' too), every model call through ``store``."""
        ...

    def call_stats(self) -> dict[str, dict[str, Any]]:
        """Return what judging has cost so far by judge name (this judge's, its members'); {} without calls."""
        ...

    def engines(self) -> list[Engine]:
        """Return the engines the judge calls (a panel: its members'); [] for one that makes no calls."""
        ...


@contextmanager
def judge_session(judge: Judge) -> Iterator[Callable[[Coroutine[Any, Any, T]], T]]:
    """Yield ``run(coroutine)``, which runs on one event loop kept for the block, the judge's engines open.

    Every batch run in the block shares the loop and each engine's connections (one HTTP session,
    not one per batch); the engines are closed, and the loop with them, when the block ends.
    """
    engines = judge.engines()
    loop = asyncio.new_event_loop()
    for engine in engines:
        engine.keep_open = True
    try:
        yield loop.run_until_complete
    finally:
        try:
            # what an interrupted batch left running is cancelled first, as asyncio.run does
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            for engine in engines:
                engine.keep_open = False
                loop.run_until_complete(engine.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


class VerifierJudge:
    """Scores answers against references with the task suite's checkers."""

    def __init__(self, name: str = "verifier", tie_threshold: float = 0.0):
        self.name = name
        self.tie_threshold = tie_threshold

    async def judge_pairs(self, store: Store | None, tasks: Sequence[PairTask],
                          progress: Track | None = None) -> list[Judgment]:
        """Return one Judgment per task; the checkers need no model, so ``store`` and ``progress`` go unused."""
        out = []
        for t in tasks:
            sa, sb = check_turns(t.prompt, t.answer_a.turns), check_turns(t.prompt, t.answer_b.turns)
            mean_a, mean_b = sum(sa) / len(sa), sum(sb) / len(sb)
            out.append(
                Judgment(
                    prompt_id=t.prompt.id,
                    model_a=t.answer_a.model,
                    model_b=t.answer_b.model,
                    judge=self.name,
                    scores_a=sa,
                    scores_b=sb,
                    score_a=mean_a,
                    score_b=mean_b,
                    verdict=verdict(mean_a, mean_b, self.tie_threshold),
                    explanation=f"reference {t.prompt.reference!r}",
                )
            )
        return out

    def call_stats(self) -> dict[str, dict[str, Any]]:
        """Return {}: the verifier makes no calls."""
        return {}

    def engines(self) -> list[Engine]:
        """Return []: the verifier makes no calls."""
        return []
