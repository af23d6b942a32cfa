"""Win rates: predicted from ratings (pairwise matrix, against an anchor) and observed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import ArenaError
from ..records import Rating
from .counts import BattleTable, CellCounts


def _as_mapping(ratings: Mapping[str, float] | Sequence[Rating]) -> dict[str, float]:
    if isinstance(ratings, Mapping):
        return {str(m): float(r) for m, r in ratings.items()}
    return {r.model: float(r.rating) for r in ratings}


def predicted_win_matrix(
    ratings: Mapping[str, float] | Sequence[Rating],
    *,
    scale: float = 400.0,
    base: float = 10.0,
) -> tuple[list[str], np.ndarray]:
    """Return (models, P) with P float64 (K, K): P[i, j] = predicted chance i beats j.

    Ties count as half a win, as in the ``ties="half"`` fit; the diagonal is 0.5.
    """
    table = _as_mapping(ratings)
    models = list(table)
    r = np.array([table[m] for m in models])
    p = 1.0 / (1.0 + base ** ((r[None, :] - r[:, None]) / scale))
    return models, p


def win_rate_vs(
    ratings: Mapping[str, float] | Sequence[Rating],
    anchor: str,
    *,
    scale: float = 400.0,
    base: float = 10.0,
) -> dict[str, float]:
    """Return each model's predicted win rate against ``anchor`` (arena-hard's "score")."""
    table = _as_mapping(ratings)
    if anchor not in table:
        raise ArenaError(f"anchor {anchor!r} is not on the leaderboard; models are: {', '.join(sorted(table))}")
    ra = table[anchor]
    return {m: 1.0 / (1.0 + base ** ((ra - r) / scale)) for m, r in table.items()}


def observed_win_matrix(table: BattleTable, *, ties: str = "half") -> tuple[list[str], np.ndarray, np.ndarray]:
    """Return (models, share, games) from the battles themselves.

    ``share`` float64 (K, K): i's share of the points against j (a tie is half a point;
    with ``ties="drop"`` ties are left out), NaN for pairs that never met.
    ``games`` int64 (K, K): battles between i and j (ties included).
    """
    cells = CellCounts.from_table(table)
    wins, tie_m = cells.matrices(cells.counts[None, :].astype(np.float64))
    wins, tie_m = wins[0], tie_m[0]
    points = wins + (0.5 * tie_m if ties == "half" else 0.0)
    games = wins + wins.T + tie_m
    denom = points + points.T
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(denom > 0, points / denom, np.nan)
    return list(table.models), share, games.astype(np.int64)
