"""Judges score the two answers of a pair and give the game's verdict.

The verifier judge checks each answer against the prompt's reference with the
task suite's checkers (0-10) and needs no model; LLM judges plug in through
the same ``judge_pairs`` interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..tasks import check_turns
from ..records import Answer, Judgment, Outcome, Prompt


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


class VerifierJudge:
    """Scores answers against references with the task suite's checkers."""

    def __init__(self, name: str = "verifier", tie_threshold: float = 0.0):
        self.name = name
        self.tie_threshold = tie_threshold

    def judge_pairs(self, tasks: Sequence[PairTask]) -> list[Judgment]:
        """Return one Judgment per task."""
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
