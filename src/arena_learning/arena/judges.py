"""Judges score the two answers of a pair and give the game's verdict, all through one interface.

A judge is config behind the :class:`Judge` protocol (AlpacaEval's lesson): the stages build one
from the run's ``judge`` section and call ``await judge.judge_pairs(store, tasks, progress)``,
whatever it is. The verifier (here) checks each answer against the prompt's reference with the
task suite's checkers (0-10), needs no model and ignores the store; the LLM judges and panels
(:mod:`arena_learning.arena.llm_judges`) make their calls through the store's ledger.
``call_stats`` gives what the calls cost, by judge name, for the reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..records import Answer, Judgment, Outcome, Prompt
from ..tasks import check_turns

if TYPE_CHECKING:
    from rich.progress import Progress

    from ..store import Store


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
                          progress: Progress | None = None) -> list[Judgment]:
        """Return the judgments of ``tasks`` (a panel: its members' too), every model call through ``store``."""
        ...

    def call_stats(self) -> dict[str, dict[str, Any]]:
        """Return what judging has cost so far by judge name (this judge's, its members'); {} without calls."""
        ...


class VerifierJudge:
    """Scores answers against references with the task suite's checkers."""

    def __init__(self, name: str = "verifier", tie_threshold: float = 0.0):
        self.name = name
        self.tie_threshold = tie_threshold

    async def judge_pairs(self, store: Store | None, tasks: Sequence[PairTask],
                          progress: Progress | None = None) -> list[Judgment]:
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
