"""Where a model is behind, with confidence: per-group paired gaps corrected for the number of groups.

``arena leaderboard WS --by GROUP --target M`` asks, for every group of prompts (category,
cluster, subset), whether the target is behind or ahead *beyond chance*. Per group:

- the battles of the group's prompts are fitted alone (``bt.rate``, ``resample="prompt"``): each
  bootstrap round draws the group's prompts with replacement and refits every model on it, so the
  models are resampled together and a difference is paired (``paired.paired_delta``'s reasoning);
- two gaps come out of those rounds: the target minus **the best other model** and the target
  minus **the field** (the mean rating of the other models). "Best" is the best other model of the
  overall board, chosen once for every group: picking the group's own best would pick the model
  that is luckiest in that group and report gaps where there are none;
- each gap's two-sided p-value is read from its bootstrap distribution by the normal approximation
  (``delta / sd``): a few hundred rounds cannot resolve the p-values of 0.05/20 that a correction
  over 20 groups needs, and the bootstrap distribution of a rating difference is close to normal;
- the p-values of all the groups are corrected together by **Holm's** step-down method: it keeps
  the chance of flagging any group at all, when no group has a gap, at ``alpha`` (the family-wise
  error rate), which is what "no group flagged when nothing is planted" asks, and it flags at least
  every group that Bonferroni flags. Benjamini-Hochberg would bound only the share of false flags
  among the flagged, and over 12-500 groups a user reads a flagged group as a finding;
- a group with fewer than ``min_prompts`` prompts is not tested (its interval is too wide to say
  anything) and is listed apart as too small, so the correction counts only the groups tested.

The intervals shown are each group's own ``ci`` percentile interval, not corrected; the flag uses
the corrected p-value. Groups where the target is behind come first, largest corrected gap first.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from dataclasses import field as dc_field  # GroupGap has a field named "field"
from typing import Any

import numpy as np

from ..errors import ArenaError
from ..records import Battle, Prompt
from .bt import BTResult, RateOptions, rate
from .counts import BattleTable
from .groups import group_battles

CORRECTIONS = ("holm", "bonferroni", "none")


@dataclass(frozen=True)
class Gap:
    """The target's rating minus another's (or the field's) in one group, with its interval and p-values.

    Attributes:
        other: the model compared with, or ``"field"`` (the mean of the other models).
        delta: the difference of the point ratings.
        ci_low, ci_high: the group's own percentile interval of the per-round difference (uncorrected).
        p: two-sided p-value of "no difference" (normal approximation of the bootstrap rounds).
        p_adjusted: ``p`` corrected over the tested groups (``correction``).
    """

    other: str
    delta: float
    ci_low: float | None
    ci_high: float | None
    p: float | None
    p_adjusted: float | None = None

    def verdict(self, alpha: float) -> str:
        """Return ``"behind"``, ``"ahead"`` or ``""`` (within chance) at corrected level ``alpha``."""
        if self.p_adjusted is None or self.p_adjusted >= alpha:
            return ""
        return "behind" if self.delta < 0 else "ahead"


@dataclass(frozen=True)
class GroupGap:
    """One group's gaps for the target: against the best other model and against the field.

    Attributes:
        group: the group's name (a category, a cluster id, a subset).
        label: a readable name for the group (a cluster's label), None when the name is the label.
        prompts: the group's prompts with a battle of the target.
        battles: the group's battles.
        best, field: the two gaps; None for a group too small to test.
        verdict: ``"behind"`` / ``"ahead"`` against the best model at the corrected level, else ``""``;
            ``"too small"`` for a group below the minimum size.
        lost: a few prompt ids of the group the target lost to the best model, most losses first.
    """

    group: str
    label: str | None
    prompts: int
    battles: int
    best: Gap | None
    field: Gap | None
    verdict: str
    lost: list[str] = dc_field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GapReport:
    """Per-group gaps of ``target``: the groups behind first, then within chance, ahead, and too small."""

    target: str
    best_other: str
    by: str
    correction: str
    alpha: float
    min_prompts: int
    groups: list[GroupGap]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def behind(self) -> list[GroupGap]:
        return [g for g in self.groups if g.verdict == "behind"]


def adjust(p: Sequence[float], method: str = "holm") -> list[float]:
    """Return ``p`` adjusted for multiple comparisons (``holm``, ``bonferroni`` or ``none``), same order.

    Holm: the i-th smallest p times (m - i), made monotone, capped at 1 (as statsmodels' ``multipletests``).
    """
    m = len(p)
    if method == "none" or m == 0:
        return list(p)
    if method == "bonferroni":
        return [min(1.0, x * m) for x in p]
    if method != "holm":
        raise ArenaError(f"unknown correction {method!r}: use one of {', '.join(CORRECTIONS)}")
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def _gap(fit: BTResult, target: str, others: Sequence[str], name: str, ci: float) -> Gap | None:
    """Return the target's gap to the mean of ``others`` in ``fit`` (one other: to that model)."""
    idx = [fit.models.index(o) for o in others if o in fit.models]
    if target not in fit.models or not idx:
        return None
    t = fit.models.index(target)
    delta = float(fit.ratings[t] - np.mean(fit.ratings[idx]))
    if fit.boot is None:
        return Gap(name, delta, None, None, None)
    with warnings.catch_warnings():  # a round without one of the models is NaN and left out
        warnings.simplefilter("ignore", RuntimeWarning)
        d = fit.boot[:, t] - np.nanmean(fit.boot[:, idx], axis=1)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return Gap(name, delta, None, None, None)
    lo, hi = np.quantile(d, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    sd = float(np.std(d, ddof=1))
    p = 1.0 if sd == 0.0 else math.erfc(abs(delta) / sd / math.sqrt(2.0))
    return Gap(name, delta, float(lo), float(hi), p)


def _lost_prompts(battles: Sequence[Battle], target: str, other: str, k: int) -> list[str]:
    """Return up to ``k`` prompt ids where ``target`` lost to ``other``, most losses first (then by id)."""
    losses: dict[str, int] = {}
    for b in battles:
        if {b.model_a, b.model_b} != {target, other} or b.outcome == "tie":
            continue
        winner = b.model_a if b.outcome == "model_a" else b.model_b
        if winner == other:
            losses[b.prompt_id] = losses.get(b.prompt_id, 0) + b.weight
    return [pid for pid, _ in sorted(losses.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def group_gaps(
    battles: Sequence[Battle],
    prompts: Sequence[Prompt],
    by: str,
    target: str,
    options: RateOptions | None = None,
    **kwargs: Any,
) -> GapReport:
    """Return the target's per-group gaps (see the module docstring), behind beyond chance first.

    ``options`` and the keywords are ``group_gaps_of``'s; ``target`` must have battles."""
    return group_gaps_of(battles, prompts, by, [target], options, **kwargs)[target]


def group_gaps_of(
    battles: Sequence[Battle],
    prompts: Sequence[Prompt],
    by: str,
    targets: Sequence[str],
    options: RateOptions | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    min_prompts: int = 10,
    alpha: float = 0.05,
    correction: str = "holm",
    examples: int = 3,
    **overrides: Any,
) -> dict[str, GapReport]:
    """Return each target's per-group gaps (``group_gaps``), the groups rated once for all targets.

    ``options`` and ``overrides`` (option names as keywords) rate every group (``bootstrap`` rounds, ``seed``;
    ``resample`` is always ``"prompt"``: a gap is over the group's prompts). ``labels`` names groups. Every
    target must have battles (ArenaError otherwise).
    """
    if correction not in CORRECTIONS:
        raise ArenaError(f"unknown correction {correction!r}: use one of {', '.join(CORRECTIONS)}")
    if not 0.0 < alpha < 1.0:
        raise ArenaError(f"alpha must be between 0 and 1, not {alpha}")
    o = RateOptions.build(options, **{**overrides, "resample": "prompt"})
    if o.bootstrap < 2:
        raise ArenaError("gaps need bootstrap rounds: set ratings.bootstrap to 100 or more")
    models = sorted({m for b in battles for m in (b.model_a, b.model_b)})
    for target in targets:
        if target not in models:
            raise ArenaError(f"--target {target!r} has no battles; models are: {', '.join(models)}")
    overall = rate(BattleTable.from_battles(battles), o, bootstrap=0)
    groups = group_battles(battles, prompts, by)
    fits: dict[str, BTResult] = {}  # a group's fit does not depend on the target: rated once, when first needed

    def fit_of(name: str) -> BTResult:
        if name not in fits:
            with warnings.catch_warnings():  # small groups often lack an exact optimum: the prior handles it
                warnings.simplefilter("ignore")
                fits[name] = rate(BattleTable.from_battles(groups[name]), o)
        return fits[name]

    reports = {}
    for target in targets:
        others = [m for m in overall.models if m != target]
        if not others:
            raise ArenaError(f"{target!r} is the only model: a gap needs another model")
        best_other = max(others, key=lambda m: (overall.rating_of(m), m))
        tested: list[tuple[str, int, list[Battle], Gap, Gap]] = []
        small: list[GroupGap] = []
        for name, bs in groups.items():
            mine = [b for b in bs if target in (b.model_a, b.model_b)]
            n_prompts = len({b.prompt_id for b in mine})
            if n_prompts == 0:
                continue
            if n_prompts < min_prompts:
                small.append(GroupGap(name, (labels or {}).get(name), n_prompts, len(bs), None, None, "too small"))
                continue
            fit = fit_of(name)
            best = _gap(fit, target, [best_other], best_other, o.ci)
            fld = _gap(fit, target, [m for m in fit.models if m != target], "field", o.ci)
            if best is None or fld is None or best.p is None or fld.p is None:
                small.append(GroupGap(name, (labels or {}).get(name), n_prompts, len(bs), best, fld, "too small"))
                continue
            tested.append((name, n_prompts, bs, best, fld))

        adj_best = adjust([t[3].p or 0.0 for t in tested], correction)
        adj_field = adjust([t[4].p or 0.0 for t in tested], correction)
        rows: list[GroupGap] = []
        for (name, n_prompts, bs, best, fld), pb, pf in zip(tested, adj_best, adj_field):
            best = Gap(best.other, best.delta, best.ci_low, best.ci_high, best.p, pb)
            fld = Gap(fld.other, fld.delta, fld.ci_low, fld.ci_high, fld.p, pf)
            verdict = best.verdict(alpha)
            lost = _lost_prompts(bs, target, best_other, examples) if best.delta < 0 else []
            rows.append(GroupGap(name, (labels or {}).get(name), n_prompts, len(bs), best, fld, verdict, lost))
        order = {"behind": 0, "": 1, "ahead": 2}
        rows.sort(key=lambda g: (order[g.verdict], g.best.delta if g.best else 0.0, g.group))
        reports[target] = GapReport(target=target, best_other=best_other, by=by, correction=correction, alpha=alpha,
                                    min_prompts=min_prompts, groups=rows + sorted(small, key=lambda g: g.group))
    return reports
