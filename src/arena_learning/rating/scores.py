"""Absolute scores of single-answer grading: FastChat's MT-Bench ``show_result`` table.

A single-answer judge (``judges/single-v1``, MT-Bench's 1-10 grading) and the verifier grade
each answer alone, turn by turn, and every pair an answer plays in carries the same grades.
This module takes the grades back out of the judgments, once per (prompt, model), and gives
per model: the mean over every graded turn (FastChat's "average"), the mean of each turn and
of each category with their counts, a 95% interval by bootstrap over prompts, and the answers
left without a grade because their judgment failed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ArenaError
from ..records import Judgment, Prompt

NO_CATEGORY = "-"
"""The category of prompts that have none."""


@dataclass
class Cell:
    """A mean score and the number of graded turns behind it."""

    mean: float
    n: int


@dataclass
class ModelScores:
    """One model's row of the scores table."""

    model: str
    mean: float | None  # over every graded turn of every prompt
    ci_low: float | None
    ci_high: float | None
    graded: int  # answers (prompts) with grades
    failed: int  # gradings that failed and left no grade: whole answers, or turns graded on their own
    turns: dict[int, Cell] = field(default_factory=dict)  # turn number (from 1) -> mean
    categories: dict[str, Cell] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["turns"] = {str(k): v for k, v in out["turns"].items()}
        return out


def graded_answers(judgments: Sequence[Judgment], turn_of: Callable[[str], tuple[str, int]] | None = None
                   ) -> tuple[dict[tuple[str, str], dict[int, float]], set[tuple[str, str, int]]]:
    """Return ((prompt id, model) -> turn (from 1) -> grade, the failed gradings left without a grade).

    A failed grading is (prompt id, model, its first turn): a whole answer, or with ``turn_of`` a
    turn graded on its own (FastChat grades each turn apart; a -1 on turn 1 is a failure even
    when turn 2 has its grade).

    ``turn_of`` maps a judgment's prompt id to (prompt id, its first turn), for judgments made
    turn by turn under ids of their own (FastChat's second turn imported as ``81#turn2``).
    A failed single-grading judgment of a run does not say which of its two answers failed, so an
    answer counts as failed only when no judgment carries its grade; a failed judgment that does
    carry one side's grades (an imported FastChat grading of -1 beside the other model's grade)
    gives that side's grades. Grades of one answer
    that differ between its pairs mean a pairwise judge: an ArenaError.
    """
    grades: dict[tuple[str, str], dict[int, float]] = {}
    in_failed: set[tuple[str, str, int]] = set()
    for j in judgments:
        pid, first = turn_of(j.prompt_id) if turn_of is not None else (j.prompt_id, 1)
        pairs: tuple[tuple[str, list[float]], ...] = ((j.model_a, j.scores_a), (j.model_b, j.scores_b))
        if j.status != "ok":
            in_failed.update((pid, m, first) for m, s in pairs if not s)
            pairs = tuple((m, s) for m, s in pairs if s)
        for m, s in pairs:
            answer = grades.setdefault((pid, m), {})
            for t, x in enumerate(s, first):
                seen = answer.setdefault(t, float(x))
                if seen != float(x):
                    raise ArenaError(
                        f"judge {j.judge!r} graded {m}'s answer to prompt {j.prompt_id} (turn {t}) {seen:g} in one "
                        f"pair and {float(x):g} in another: its scores depend on the other answer (a pairwise "
                        "judge), so they are no absolute grades; score with a single-answer judge (template: "
                        "single) or the verifier")
    grades = {k: dict(sorted(v.items())) for k, v in grades.items() if v}
    return grades, {(p, m, t) for p, m, t in in_failed if t not in grades.get((p, m), {})}


def score_table(
    judgments: Sequence[Judgment],
    prompts: Sequence[Prompt],
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    turn_of: Callable[[str], tuple[str, int]] | None = None,
) -> list[ModelScores]:
    """Return every model's scores, best mean first (models with no grade last).

    ``prompts`` give the categories (a judgment of a prompt not among them counts under
    ``NO_CATEGORY``). The interval resamples prompts, the same resample for every model.
    ``turn_of``: see ``graded_answers``.
    """
    if not judgments:
        raise ArenaError("no judgments to score: run `arena battle` (or `arena run`) first")
    grades, failed = graded_answers(judgments, turn_of)
    category = {p.id: p.category or NO_CATEGORY for p in prompts}
    models = sorted({m for _, m in grades} | {m for _, m, _ in failed})
    pids = sorted({p for p, _ in grades})
    p_index, m_index = {p: i for i, p in enumerate(pids)}, {m: i for i, m in enumerate(models)}
    # per (model, prompt): sum of grades and number of graded turns, float (M, P)
    sums = np.zeros((len(models), len(pids)))
    counts = np.zeros((len(models), len(pids)))
    rows: dict[str, ModelScores] = {m: ModelScores(m, None, None, None, 0, 0) for m in models}
    turn_acc: dict[str, dict[int, list[float]]] = {m: {} for m in models}
    cat_acc: dict[str, dict[str, list[float]]] = {m: {} for m in models}
    for (pid, m), by_turn in grades.items():
        sums[m_index[m], p_index[pid]] = sum(by_turn.values())
        counts[m_index[m], p_index[pid]] = len(by_turn)
        rows[m].graded += 1
        for t, x in by_turn.items():
            turn_acc[m].setdefault(t, []).append(x)
        cat_acc[m].setdefault(category.get(pid, NO_CATEGORY), []).extend(by_turn.values())
    for _, m, _ in failed:
        rows[m].failed += 1
    lo = hi = None
    if bootstrap > 0 and pids:
        rng = np.random.default_rng(seed)
        pick = rng.integers(0, len(pids), size=(bootstrap, len(pids)))  # int (B, P)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums[:, pick].sum(-1) / counts[:, pick].sum(-1)  # float (M, B); NaN: no grade drawn
        alpha = (1.0 - ci) / 2.0
        with warnings.catch_warnings():  # a model whose every answer failed has no grade to resample
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = np.nanquantile(means, alpha, axis=1), np.nanquantile(means, 1 - alpha, axis=1)
    for m, row in rows.items():
        i = m_index[m]
        n = counts[i].sum()
        if n:
            row.mean = float(sums[i].sum() / n)
            if lo is not None and hi is not None:
                row.ci_low, row.ci_high = float(lo[i]), float(hi[i])
        row.turns = {t: Cell(float(np.mean(xs)), len(xs)) for t, xs in sorted(turn_acc[m].items())}
        row.categories = {c: Cell(float(np.mean(xs)), len(xs)) for c, xs in sorted(cat_acc[m].items())}
    return sorted(rows.values(), key=lambda r: (r.mean is None, -(r.mean or 0.0), r.model))
