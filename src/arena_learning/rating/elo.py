"""Online Elo, for comparison with the Bradley-Terry ratings.

Online Elo depends on the order of the battles and on ``k``; it is what the first Chatbot
Arena leaderboards showed, kept here so a report can show how far it is from the
order-free maximum-likelihood ratings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..records import Battle
from .counts import A_WINS, TIE, BattleTable


def online_elo_table(
    table: BattleTable,
    *,
    k: float = 4.0,
    scale: float = 400.0,
    base: float = 10.0,
    initial: float = 1000.0,
) -> dict[str, float]:
    """Return each model's Elo after playing the battles of ``table`` in order.

    Each battle moves the two ratings by ``k * (score - expected)``; a tie scores 0.5.
    ``k=4`` is FastChat's choice for a large battle log; a small log needs a larger k
    (e.g. 16-32) to move at all.
    """
    ratings = [initial] * table.n_models
    # plain Python floats: the loop is inherently sequential, and list indexing is
    # several times faster than numpy scalar indexing
    a_list = table.model_a.tolist()
    b_list = table.model_b.tolist()
    scores = np.where(table.outcome == A_WINS, 1.0, np.where(table.outcome == TIE, 0.5, 0.0)).tolist()
    for a, b, s in zip(a_list, b_list, scores):
        ra, rb = ratings[a], ratings[b]
        ea = 1.0 / (1.0 + base ** ((rb - ra) / scale))
        delta = k * (s - ea)
        ratings[a] = ra + delta
        ratings[b] = rb - delta
    return dict(zip(table.models, ratings))


def online_elo(
    battles: Sequence[Battle],
    *,
    k: float = 4.0,
    scale: float = 400.0,
    base: float = 10.0,
    initial: float = 1000.0,
) -> dict[str, float]:
    """Return each model's online Elo after ``battles`` in the order given (see ``online_elo_table``)."""
    return online_elo_table(BattleTable.from_battles(battles), k=k, scale=scale, base=base, initial=initial)
