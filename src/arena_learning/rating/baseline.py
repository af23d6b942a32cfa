"""Arena-hard's headline: each model's win rate against one baseline model, with a bootstrap CI.

As arena-hard-auto's show_result.py (``load_judgments`` / ``print_leaderboard``): every battle
against the baseline is a point for the model (1 a win, 0.5 a tie, 0 a loss), repeated by its
weight (a strong verdict counts 3 there), and the win rate is the mean point. Two choices
differ from that script, and say so: the interval resamples *prompts* (every battle of a drawn
prompt comes along, so the two games of one prompt stay together; arena-hard resamples the
rows), and it is the 2.5-97.5 percentile interval (a 95% CI; arena-hard-v2.0 prints 5-95). The
point estimate is the observed win rate, not the bootstrap mean. The baseline is listed at 50%, in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ArenaError
from ..records import Battle

_POINTS = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}  # model_a's point for each outcome


@dataclass(frozen=True)
class BaselineRate:
    """One model's row of the headline: win rate against the baseline, its CI, and the weighted counts."""

    model: str
    win_rate: float  # ties as half, in [0, 1]
    ci_low: float | None
    ci_high: float | None
    wins: float  # weighted counts, as the win rate uses them
    ties: float
    losses: float
    prompts: int  # prompts with at least one battle against the baseline

    @property
    def battles(self) -> float:
        return self.wins + self.ties + self.losses


def baseline_win_rates(
    battles: Sequence[Battle],
    baseline: str,
    *,
    bootstrap: int = 100,
    seed: int = 0,
    level: float = 0.95,
) -> list[BaselineRate]:
    """Return each model's win rate against ``baseline`` (ties as half), best first, the baseline among them at 0.5.

    Only battles with the baseline on one side count; a battle of weight w counts w times.
    ``bootstrap`` rounds resample the prompts with replacement (seeded by ``seed``; one multinomial
    draw per round over the prompt ids in sorted order); the CI is the ``level`` percentile interval
    of the rounds' win rates (None with ``bootstrap=0``).
    """
    names = sorted({b.model_a for b in battles} | {b.model_b for b in battles})
    if baseline not in names:
        have = ", ".join(names) or "none"
        raise ArenaError(f"baseline {baseline!r} has no battles here (models with battles: {have}); "
                         "give one of those to --baseline")
    rows = [b for b in battles if (b.model_a == baseline) != (b.model_b == baseline)]
    others = sorted({b.model_b if b.model_a == baseline else b.model_a for b in rows})
    if not others:
        raise ArenaError(f"baseline {baseline!r} met no other model: nothing to compare with it")
    model_idx = {m: i for i, m in enumerate(others)}
    prompt_ids = sorted({b.prompt_id for b in rows})
    prompt_idx = {p: i for i, p in enumerate(prompt_ids)}
    n, k, p = len(rows), len(others), len(prompt_ids)
    # Per battle: the other model, its prompt, its point against the baseline, its weight. All (n,).
    model = np.fromiter((model_idx[b.model_b if b.model_a == baseline else b.model_a] for b in rows), np.int64, n)
    prompt = np.fromiter((prompt_idx[b.prompt_id] for b in rows), np.int64, n)
    point = np.fromiter((_POINTS[b.outcome] if b.model_b == baseline else 1.0 - _POINTS[b.outcome] for b in rows),
                        np.float64, n)
    weight = np.fromiter((b.weight for b in rows), np.float64, n)
    # Reduce first: float64 (P, K) weighted points and weights of each model on each prompt.
    cell = prompt * k + model
    points_pk = np.bincount(cell, weights=weight * point, minlength=p * k).reshape(p, k)
    weight_pk = np.bincount(cell, weights=weight, minlength=p * k).reshape(p, k)
    wins_k = np.bincount(model, weights=weight * (point == 1.0), minlength=k)
    ties_k = np.bincount(model, weights=weight * (point == 0.5), minlength=k)
    losses_k = np.bincount(model, weights=weight * (point == 0.0), minlength=k)
    rate_k = points_pk.sum(0) / weight_pk.sum(0)
    low_k = high_k = np.full(k, np.nan)
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        # int64 (R, P): how often each prompt is drawn in each round (P draws with replacement).
        draws = rng.multinomial(p, np.full(p, 1.0 / p), size=bootstrap).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            rounds = (draws @ points_pk) / (draws @ weight_pk)  # (R, K); NaN where a model drew no prompt
        tail = 100.0 * (1.0 - level) / 2.0
        low_k, high_k = np.nanpercentile(rounds, [tail, 100.0 - tail], axis=0)
    n_prompts = (weight_pk > 0).sum(0)
    out = [
        BaselineRate(m, float(rate_k[i]), _or_none(low_k[i]), _or_none(high_k[i]), float(wins_k[i]),
                     float(ties_k[i]), float(losses_k[i]), int(n_prompts[i]))
        for i, m in enumerate(others)
    ]
    ci = 0.5 if bootstrap > 0 else None
    out.append(BaselineRate(baseline, 0.5, ci, ci, 0.0, 0.0, 0.0, p))  # the reference line, no counts of its own
    # Sorted with the baseline among them, as arena-hard's format_confidence_interval does.
    out.sort(key=lambda r: (-r.win_rate, r.model != baseline, r.model))
    return out


def _or_none(x: float) -> float | None:
    return None if np.isnan(x) else float(x)
