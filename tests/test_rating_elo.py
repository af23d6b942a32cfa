"""Online Elo and win rates."""

from __future__ import annotations

import numpy as np
import pytest

from arena_learning.errors import ArenaError
from arena_learning.rating.bt import rate
from arena_learning.rating.counts import BattleTable
from arena_learning.rating.elo import online_elo, online_elo_table
from arena_learning.rating.winrate import observed_win_matrix, predicted_win_matrix, win_rate_vs
from arena_learning.records import Battle, Rating


def _b(a, b, outcome, pid="p"):
    return Battle(prompt_id=pid, model_a=a, model_b=b, outcome=outcome)


def test_online_elo_follows_the_update_rule_by_hand():
    battles = [_b("x", "y", "model_a"), _b("y", "z", "tie"), _b("z", "x", "model_a")]
    got = online_elo(battles, k=32)
    # 1: x beats y at equal ratings: +16 / -16
    x, y, z = 1016.0, 984.0, 1000.0
    # 2: y (984) ties z (1000)
    ey = 1 / (1 + 10 ** ((z - y) / 400))
    y, z = y + 32 * (0.5 - ey), z - 32 * (0.5 - ey)
    # 3: z beats x
    ez = 1 / (1 + 10 ** ((x - z) / 400))
    z, x = z + 32 * (1 - ez), x - 32 * (1 - ez)
    assert got == pytest.approx({"x": x, "y": y, "z": z}, abs=1e-12)
    assert sum(got.values()) == pytest.approx(3000.0)  # zero-sum updates


def test_online_elo_orders_models_like_bradley_terry_on_a_long_log():
    rng = np.random.default_rng(0)
    true = np.array([1200.0, 1000.0, 800.0])
    n = 20_000
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(1, 3, n)) % 3
    p = 1 / (1 + 10 ** ((true[b] - true[a]) / 400))
    outcome = np.where(rng.random(n) < p, 0, 1).astype(np.int8)
    names = np.array(["top", "mid", "low"], dtype=object)
    table = BattleTable.from_arrays(names[a], names[b], outcome)
    elo = online_elo_table(table, k=4)
    bt = rate(table, bootstrap=0)
    assert elo["top"] > elo["mid"] > elo["low"]
    for m in ("top", "mid", "low"):
        assert elo[m] == pytest.approx(bt.rating_of(m), abs=60)


def test_predicted_win_matrix_and_win_rate_against_an_anchor():
    ratings = [Rating(model="a", rating=1400.0), Rating(model="b", rating=1000.0), Rating(model="c", rating=1000.0)]
    models, p = predicted_win_matrix(ratings)
    assert models == ["a", "b", "c"]
    assert p[0, 1] == pytest.approx(10 / 11)  # 400 points = odds of 10 to 1
    np.testing.assert_allclose(p + p.T, 1.0)
    np.testing.assert_allclose(np.diag(p), 0.5)
    rates = win_rate_vs({"a": 1400.0, "b": 1000.0}, "b")
    assert rates == pytest.approx({"a": 10 / 11, "b": 0.5})
    with pytest.raises(ArenaError, match="anchor 'zz'"):
        win_rate_vs(ratings, "zz")


def test_observed_win_matrix_counts_ties_as_half_and_marks_pairs_that_never_met():
    battles = [_b("x", "y", "model_a"), _b("y", "x", "tie"), _b("y", "x", "model_a"), _b("x", "y", "model_a"),
               _b("z", "y", "model_b")]
    table = BattleTable.from_battles(battles)
    models, share, games = observed_win_matrix(table)
    i = {m: k for k, m in enumerate(models)}
    assert share[i["x"], i["y"]] == pytest.approx(2.5 / 4)
    assert share[i["y"], i["x"]] == pytest.approx(1.5 / 4)
    assert share[i["y"], i["z"]] == 1.0
    assert np.isnan(share[i["x"], i["z"]])
    assert games[i["x"], i["y"]] == 4 and games[i["x"], i["z"]] == 0
    _, dropped, _ = observed_win_matrix(table, ties="drop")
    assert dropped[i["x"], i["y"]] == pytest.approx(2 / 3)
