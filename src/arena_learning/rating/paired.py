"""Paired comparisons of two models: the rating difference with a CI from shared resamples, exact answers gained.

Two models rated on the same prompts by the same judge are compared honestly by the
difference of their ratings *within* each bootstrap round, not by whether their separate 95%
intervals overlap: a prompt that is hard for both moves both ratings together, and the
difference keeps only what differs. ``bt.rate`` with ``resample="prompt"`` already draws each
round as one cluster resample of the prompt ids (every battle of a drawn prompt comes along)
and fits every model on it, so the paired interval is the percentile interval of
``boot[:, a] - boot[:, b]`` of that very fit: the same numbers the leaderboard's intervals come
from, nothing refitted.

Exact answers (checker score 10 on the built-in task suite) are counted per model and prompt;
between two models, "gained" are prompts the first answers exactly and the second does not,
"lost" the reverse, overall and per category.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ArenaError
from ..records import Answer, Battle, ExactAnswers, ExactCount, Prompt
from .bt import BTResult

EXACT_SCORE = 10.0
"""The checker score of a right answer (``tasks.suite``: 10 right, partial credit below)."""


@dataclass(frozen=True)
class PairedDelta:
    """``model``'s rating minus ``other``'s, with the interval of that difference over shared resamples.

    Attributes:
        rating: the difference of the point ratings.
        ci_low, ci_high: percentile interval (the fit's ``ci``) of the per-round difference;
            None without bootstrap or when no round holds both models.
        p_better: share of those rounds in which ``model`` is rated above ``other``.
        rounds: bootstrap rounds that rated both models.
    """

    model: str
    other: str
    rating: float
    ci_low: float | None = None
    ci_high: float | None = None
    p_better: float | None = None
    rounds: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_delta(fit: BTResult, model: str, other: str) -> PairedDelta:
    """Return ``model`` minus ``other`` from ``fit``: the point difference, and its interval over ``fit.boot``.

    Each bootstrap round of ``fit`` rated both models on one resample of the prompts, so the
    round's difference is paired. A round without one of them (NaN) is left out.
    """
    for name in (model, other):
        if name not in fit.models:
            raise ArenaError(f"model {name!r} has no battles here; the models are: {', '.join(sorted(fit.models))}")
    if model == other:
        raise ArenaError(f"compare two different models, not {model!r} with itself")
    i, j = fit.models.index(model), fit.models.index(other)
    point = float(fit.ratings[i] - fit.ratings[j])
    if fit.boot is None:
        return PairedDelta(model, other, point)
    diff = fit.boot[:, i] - fit.boot[:, j]
    diff = diff[np.isfinite(diff)]
    if diff.size == 0:
        return PairedDelta(model, other, point)
    alpha = (1.0 - float(fit.settings.get("ci", 0.95))) / 2.0
    lo, hi = np.quantile(diff, [alpha, 1.0 - alpha])
    return PairedDelta(model, other, point, float(lo), float(hi), float((diff > 0).mean()), int(diff.size))


@dataclass(frozen=True)
class HeadToHead:
    """The battles of ``model`` against ``other`` itself: on prompts both played."""

    model: str
    other: str
    wins: int = 0
    losses: int = 0
    ties: int = 0
    shared_prompts: int = 0  # prompts with battles of both models


def head_to_head(battles: Iterable[Battle], model: str, other: str) -> HeadToHead:
    """Return the wins, losses and ties of ``model`` in its battles against ``other`` (by battle weight)."""
    wins = losses = ties = 0
    played: dict[str, set[str]] = {model: set(), other: set()}
    for b in battles:
        for m in (b.model_a, b.model_b):
            if m in played:
                played[m].add(b.prompt_id)
        if {b.model_a, b.model_b} != {model, other}:
            continue
        if b.outcome == "tie":
            ties += b.weight
        elif (b.outcome == "model_a") == (b.model_a == model):
            wins += b.weight
        else:
            losses += b.weight
    return HeadToHead(model, other, wins, losses, ties, len(played[model] & played[other]))


# ---- exact answers --------------------------------------------------------------------------


def exact_answers(prompts: Sequence[Prompt], answers: Iterable[Answer]) -> dict[str, dict[str, bool]]:
    """Return model -> prompt id -> whether the answer is exact (checker score 10), for prompts with a checker.

    Prompts without a checker reference (open prompts) are left out: there is no exact answer to count.
    """
    from ..tasks import check

    checked = {p.id: p for p in prompts if p.checker is not None and p.reference}
    out: dict[str, dict[str, bool]] = {}
    for a in answers:
        p = checked.get(a.prompt_id)
        if p is not None:
            out.setdefault(a.model, {})[a.prompt_id] = check(p, a.turns) >= EXACT_SCORE
    return out


def exact_count(correct: Mapping[str, Mapping[str, bool]], categories: Mapping[str, str | None], model: str,
                other: str | None = None) -> ExactAnswers | None:
    """Return ``model``'s exact answers (``exact_answers``' table), gained and lost against ``other`` if given.

    None when no answer of ``model`` was checked (no prompt carries a checker reference).
    """
    mine = correct.get(model) or {}
    if not mine:
        return None
    theirs = correct.get(other) if other is not None else None
    start = None if theirs is None else 0
    total = ExactAnswers(gained=start, lost=start, vs=None if theirs is None else other)
    for pid, ok in mine.items():
        cat = categories.get(pid) or "other"
        row = total.per_category.setdefault(cat, ExactCount(gained=start, lost=start))
        for rec in (total, row):
            rec.of += 1
            rec.n += int(ok)
            if theirs is not None and pid in theirs:
                rec.gained = (rec.gained or 0) + int(ok and not theirs[pid])
                rec.lost = (rec.lost or 0) + int(theirs[pid] and not ok)
    total.per_category = dict(sorted(total.per_category.items()))
    return total


# ---- the whole comparison -------------------------------------------------------------------


@dataclass
class ModelDiff:
    """Everything ``arena leaderboard --diff A B`` says of A against B."""

    delta: PairedDelta
    head: HeadToHead
    exact: ExactAnswers | None
    exact_other: ExactAnswers | None
    settings: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = self.delta
        return {"model": d.model, "other": d.other,
                "delta": {"rating": d.rating, "ci_low": d.ci_low, "ci_high": d.ci_high},
                "p_better": d.p_better, "rounds": d.rounds,
                "head_to_head": {"wins": self.head.wins, "losses": self.head.losses, "ties": self.head.ties,
                                 "shared_prompts": self.head.shared_prompts},
                "exact": None if self.exact is None else self.exact.as_dict(),
                "exact_other": None if self.exact_other is None else self.exact_other.as_dict(),
                "settings": self.settings}


def model_diff(fit: BTResult, battles: Sequence[Battle], model: str, other: str,
               prompts: Sequence[Prompt] = (), answers: Iterable[Answer] = ()) -> ModelDiff:
    """Return the paired comparison of ``model`` with ``other``: ``fit`` must be the rating of ``battles``."""
    delta = paired_delta(fit, model, other)
    correct = exact_answers(prompts, answers)
    cats = {p.id: p.category for p in prompts}
    keys = ("bootstrap", "resample", "seed", "ci", "anchor")
    settings: dict[str, Any] = {k: fit.settings[k] for k in keys if k in fit.settings}
    return ModelDiff(delta, head_to_head(battles, model, other), exact_count(correct, cats, model, other),
                     exact_count(correct, cats, other, model), settings)

