"""Re-anchoring: what a change of judge would do to a board, measured on a seeded sample of its battles.

``arena reanchor WS NEW.yaml --anchors N`` has the new judge (the ``judge:`` of ``NEW.yaml``) judge ``N``
battles drawn from the old judge's (each a prompt and a pair of models, the answers already in the
workspace; through the ledger), rates both judges on those same anchors, and fits the map from the old
judge's ratings to the new one's, ``new = a + b * old`` (least squares over the models), with 95% CIs from
a paired bootstrap of the anchors (one resample, both judges rated on it). It reports, per model, the old
rating (whole board), both judges' ratings on the anchors, the mapped rating and the residual (what the
map does not explain: the model the new judge likes more or less than the old one did), and the ranks
under each judge on the anchors: the models whose rank the change of judge would move.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..records import Battle, Rating


@dataclass
class ReanchorRow:
    model: str
    old: float | None  # the old judge's rating on the whole board
    old_anchor: float  # on the anchors
    new_anchor: float
    mapped: float  # a + b * old_anchor
    residual: float  # new_anchor - mapped
    rank_old: int  # on the anchors
    rank_new: int


@dataclass
class Reanchor:
    old_judge: str
    new_judge: str
    anchors: int
    a: float
    b: float
    a_ci: tuple[float, float] | None
    b_ci: tuple[float, float] | None
    rows: list[ReanchorRow] = field(default_factory=list)

    @property
    def moved(self) -> list[str]:
        return [r.model for r in self.rows if r.rank_old != r.rank_new]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "moved": self.moved}


def sample_anchors(battles: Sequence[Battle], n: int, seed: int) -> list[tuple[str, str, str]]:
    """Return ``n`` (prompt id, model a, model b) drawn without replacement from the distinct battles, seeded."""
    keys = sorted({(b.prompt_id, *sorted((b.model_a, b.model_b))) for b in battles})
    random.Random(seed).shuffle(keys)
    return [(p, a, b) for p, a, b in keys[:n]]


def _ranks(ratings: dict[str, float]) -> dict[str, int]:
    order = sorted(ratings, key=lambda m: -ratings[m])
    return {m: i + 1 for i, m in enumerate(order)}


def _fit(old: dict[str, float], new: dict[str, float]) -> tuple[float, float]:
    models = sorted(set(old) & set(new))
    x = np.array([old[m] for m in models])
    y = np.array([new[m] for m in models])
    if len(models) < 2 or float(np.var(x)) == 0.0:
        return float(np.mean(y - x)) if models else 0.0, 1.0
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def reanchor(old_judge: str, new_judge: str, old_battles: Sequence[Battle], new_battles: Sequence[Battle],
             board: Sequence[Rating], *, bootstrap: int = 200, seed: int = 0) -> Reanchor:
    """Return the map from the old judge's ratings to the new one's on the anchors both judged (module docstring).

    ``old_battles`` / ``new_battles``: each judge's battles on the anchors (matched by prompt and pair);
    ``board``: the old judge's whole leaderboard."""
    from .bt import leaderboard

    def key(b: Battle) -> tuple[str, str, str]:
        low, high = sorted((b.model_a, b.model_b))
        return b.prompt_id, low, high

    new_by = {key(b): b for b in new_battles}
    pairs = [(o, new_by[key(o)]) for o in old_battles if key(o) in new_by]

    def rate(battles: Sequence[Battle]) -> dict[str, float]:
        return {r.model: r.rating for r in leaderboard(battles, bootstrap=0, seed=seed)}

    old_r, new_r = rate([o for o, _ in pairs]), rate([n for _, n in pairs])
    a, b = _fit(old_r, new_r)
    a_ci = b_ci = None
    if bootstrap > 0 and len(pairs) > 1:
        rng = np.random.default_rng(seed)
        fits = []
        for _ in range(bootstrap):
            pick = rng.integers(0, len(pairs), len(pairs))
            o = rate([pairs[i][0] for i in pick])
            n = rate([pairs[i][1] for i in pick])
            fits.append(_fit(o, n))
        arr = np.array(fits)
        a_ci = (float(np.quantile(arr[:, 0], 0.025)), float(np.quantile(arr[:, 0], 0.975)))
        b_ci = (float(np.quantile(arr[:, 1], 0.025)), float(np.quantile(arr[:, 1], 0.975)))
    whole = {r.model: r.rating for r in board}
    ro, rn = _ranks(old_r), _ranks(new_r)
    rows = []
    for m in sorted(old_r, key=lambda m: -old_r[m]):
        if m not in new_r:
            continue
        mapped = a + b * old_r[m]
        rows.append(ReanchorRow(model=m, old=whole.get(m), old_anchor=old_r[m], new_anchor=new_r[m], mapped=mapped,
                                residual=new_r[m] - mapped, rank_old=ro[m], rank_new=rn[m]))
    return Reanchor(old_judge=old_judge, new_judge=new_judge, anchors=len(pairs), a=a, b=b, a_ci=a_ci, b_ci=b_ci,
                    rows=rows)
