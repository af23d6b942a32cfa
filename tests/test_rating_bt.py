"""Bradley-Terry ratings: exactness against logistic regression, the bootstrap, edge cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression

from arena_learning.errors import ArenaError
from arena_learning.rating.bt import RatingWarning, fit_counts, fits_exist, leaderboard, rate
from arena_learning.rating.counts import (
    A_WINS,
    B_WINS,
    TIE,
    BattleTable,
    CellCounts,
    PromptPatterns,
    bootstrap_counts,
)
from arena_learning.records import Battle

ELO = 400.0 / math.log(10.0)


def simulate_table(true_elo, n, rng, *, tie_share=0.3, per_prompt=1):
    """Battles from Bradley-Terry with ties consistent with "a tie is half a win".

    P(tie) = tie_share * 4 p (1 - p) and P(a wins) = p - P(tie) / 2, so that
    P(a wins) + P(tie) / 2 = p exactly: the half-tie MLE is consistent for ``true_elo``.
    """
    k = len(true_elo)
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    p = 1.0 / (1.0 + 10.0 ** ((true_elo[b] - true_elo[a]) / 400.0))
    p_tie = tie_share * 4.0 * p * (1.0 - p)
    u = rng.random(n)
    outcome = np.where(u < p - p_tie / 2, A_WINS, np.where(u < p + p_tie / 2, TIE, B_WINS)).astype(np.int8)
    names = np.array([f"m{i:02d}" for i in range(k)], dtype=object)
    return BattleTable.from_arrays(names[a], names[b], outcome, np.arange(n) // per_prompt)


def in_table_order(result, true_elo):
    return np.array([true_elo[int(m[1:])] for m in result.models])


def expanded_logistic_table(table):
    """The per-battle design FastChat fits: +1/-1 model columns, a tie as two half rows."""
    n, k = table.n_battles, table.n_models
    x = np.zeros((n, k))
    x[np.arange(n), table.model_a] = 1.0
    x[np.arange(n), table.model_b] = -1.0
    tie = table.outcome == TIE
    y = (table.outcome == A_WINS).astype(float)
    y[tie] = 1.0
    x2 = np.vstack([x, x[tie]])
    y2 = np.concatenate([y, np.zeros(tie.sum())])
    w2 = np.concatenate([np.where(tie, 0.5, 1.0), np.full(tie.sum(), 0.5)])
    return x2, y2, w2


@pytest.fixture(scope="module")
def small_table():
    rng = np.random.default_rng(7)
    true = rng.normal(0, 150, 8) + 1000
    return simulate_table(true, 6000, rng, per_prompt=3)


def test_mle_equals_sklearn_logistic_regression_on_expanded_battles(small_table):
    result = rate(small_table, bootstrap=0)
    x, y, w = expanded_logistic_table(small_table)
    lr = LogisticRegression(fit_intercept=False, C=np.inf, tol=1e-14, max_iter=10_000, solver="newton-cg")
    lr.fit(x, y, sample_weight=w)
    expected = lr.coef_[0] * ELO
    expected += 1000.0 - expected.mean()
    assert np.abs(result.ratings - expected).max() < 1e-6


def test_mle_equals_scipy_minimum_of_per_battle_log_loss(small_table):
    x, y, w = expanded_logistic_table(small_table)

    def loss(beta):
        z = x @ beta
        return -(w * (y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z))).sum()

    def grad(beta):
        p = 1 / (1 + np.exp(-(x @ beta)))
        return -(x.T @ (w * (y - p)))

    def hess(beta):
        p = 1 / (1 + np.exp(-(x @ beta)))
        return (x.T * (w * p * (1 - p))) @ x

    k = small_table.n_models
    fit = minimize(loss, np.zeros(k), jac=grad, hess=hess, method="trust-exact", options={"gtol": 1e-12})
    expected = fit.x * ELO
    expected += 1000.0 - expected.mean()
    assert np.abs(rate(small_table, bootstrap=0).ratings - expected).max() < 1e-6


def test_anchor_fixes_its_model_and_shifts_all_others_equally(small_table):
    free = rate(small_table, bootstrap=0)
    anchored = rate(small_table, bootstrap=20, anchor="m03", anchor_rating=1114.0)
    assert anchored.rating_of("m03") == pytest.approx(1114.0, abs=1e-9)
    np.testing.assert_allclose(anchored.ratings - free.ratings, 1114.0 - free.rating_of("m03"), atol=1e-8)
    i = anchored.models.index("m03")
    assert anchored.ci_low[i] == pytest.approx(1114.0) and anchored.ci_high[i] == pytest.approx(1114.0)


def test_dropping_ties_equals_logistic_regression_without_tie_rows(small_table):
    t = small_table
    keep = t.outcome != TIE
    x = np.zeros((keep.sum(), t.n_models))
    x[np.arange(keep.sum()), t.model_a[keep]] = 1.0
    x[np.arange(keep.sum()), t.model_b[keep]] = -1.0
    y = (t.outcome[keep] == A_WINS).astype(float)
    lr = LogisticRegression(fit_intercept=False, C=np.inf, tol=1e-14, max_iter=10_000, solver="newton-cg").fit(x, y)
    expected = lr.coef_[0] * ELO
    expected += 1000.0 - expected.mean()
    result = rate(t, bootstrap=0, ties="drop")
    assert np.abs(result.ratings - expected).max() < 1e-6
    assert result.ties.sum() == 2 * (t.outcome == TIE).sum()  # still counted


def test_davidson_fit_maximises_the_davidson_likelihood(small_table):
    t = small_table
    k = t.n_models

    def negloglik(par):
        th, phi = par[:k], par[k]
        d = th[t.model_a] - th[t.model_b]
        z = np.log(np.exp(d / 2) + np.exp(-d / 2) + np.exp(phi))
        ll = np.where(t.outcome == A_WINS, d / 2, np.where(t.outcome == B_WINS, -d / 2, phi)) - z
        return -ll.sum() + 0.5 * th.sum() ** 2  # the last term only fixes the gauge (sum = 0)

    fit = minimize(negloglik, np.zeros(k + 1), method="BFGS", options={"gtol": 1e-9})
    expected = fit.x[:k] * ELO
    expected += 1000.0 - expected.mean()
    result = rate(t, bootstrap=0, ties="davidson")
    assert np.abs(result.ratings - expected).max() < 1e-3
    assert result.tie_param == pytest.approx(math.exp(fit.x[k]), rel=1e-5)


def test_davidson_recovers_ratings_and_tie_propensity_of_davidson_data():
    rng = np.random.default_rng(3)
    k, n, nu = 6, 60_000, 0.8
    true = np.linspace(-200, 200, k)
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    d = (true[a] - true[b]) / ELO
    z = np.exp(d / 2) + np.exp(-d / 2) + nu
    u = rng.random(n)
    pa, pb = np.exp(d / 2) / z, np.exp(-d / 2) / z
    outcome = np.where(u < pa, A_WINS, np.where(u < pa + pb, B_WINS, TIE)).astype(np.int8)
    names = np.array([f"m{i:02d}" for i in range(k)], dtype=object)
    result = rate(BattleTable.from_arrays(names[a], names[b], outcome), bootstrap=0, ties="davidson")
    assert result.tie_param == pytest.approx(nu, rel=0.05)
    assert np.abs(result.ratings - in_table_order(result, true + 1000)).max() < 12


def _battle(pid, a, b, outcome):
    return Battle(prompt_id=pid, model_a=a, model_b=b, outcome=outcome)


def test_leaderboard_counts_sorts_and_ranks_hand_made_battles():
    battles = [
        _battle("p1", "x", "y", "model_a"),
        _battle("p1", "y", "x", "model_b"),
        _battle("p2", "x", "z", "tie"),
        _battle("p2", "z", "y", "model_a"),
        _battle("p3", "y", "z", "model_a"),
        _battle("p3", "z", "x", "model_a"),
    ]
    board = leaderboard(battles, bootstrap=0)
    assert [r.model for r in board] == ["x", "z", "y"]
    x, z, y = board
    assert (x.wins, x.losses, x.ties, x.battles) == (2, 1, 1, 4)
    assert (z.wins, z.losses, z.ties, z.battles) == (2, 1, 1, 4)
    assert (y.wins, y.losses, y.ties, y.battles) == (1, 3, 0, 4)
    assert x.rating == pytest.approx(z.rating, abs=1e-9)  # x and z have the same points, 2.5 of 4
    assert [r.rank for r in board] == [1, 1, 3]
    assert all(r.ci_low is None and r.ci_high is None and r.rank_ci is None for r in board)
    assert sum(r.rating for r in board) / 3 == pytest.approx(1000.0)
    # closed form: x and z at +d, y at -2d with y's score 1 = 2 * 2 * sigma(-3d) (2 games each)
    d = math.log(3.0) / 3.0  # sigma(-3d) = 1/4  =>  3d = log 3
    assert x.rating - y.rating == pytest.approx(3 * d * ELO, abs=1e-9)


def test_rank_ci_counts_models_confidently_above():
    battles = []
    # a >> b >> c with many games, d == c: CI of d overlaps c
    plan = [("a", "b", 90, 10), ("b", "c", 90, 10), ("a", "c", 99, 1), ("c", "d", 50, 50), ("b", "d", 90, 10),
            ("a", "d", 99, 1)]
    for x, y, wx, wy in plan:
        battles += [_battle(f"{x}{y}{i}", x, y, "model_a") for i in range(wx)]
        battles += [_battle(f"{y}{x}{i}", x, y, "model_b") for i in range(wy)]
    board = {r.model: r for r in leaderboard(battles, bootstrap=200, resample="battle")}
    for r in board.values():
        above = sum(o.ci_low > r.ci_high for o in board.values())
        assert r.rank_ci == 1 + above
    assert board["a"].rank_ci == 1 and board["b"].rank_ci == 2
    assert board["c"].rank_ci == board["d"].rank_ci == 3


def test_bootstrap_is_deterministic_for_a_seed(small_table):
    one = rate(small_table, bootstrap=50, seed=11)
    two = rate(small_table, bootstrap=50, seed=11)
    other = rate(small_table, bootstrap=50, seed=12)
    np.testing.assert_array_equal(one.boot, two.boot)
    assert not np.array_equal(one.boot, other.boot)
    np.testing.assert_array_equal(one.ratings, other.ratings)


def test_model_that_never_lost_gets_a_warning_and_a_finite_rating():
    battles = [_battle(f"p{i}", "champ", "b", "model_a") for i in range(5)]
    battles += [_battle(f"q{i}", "b", "c", "model_a" if i % 3 else "model_b") for i in range(9)]
    with pytest.warns(RatingWarning, match="never lost: champ"):
        board = leaderboard(battles, bootstrap=30)
    by = {r.model: r for r in board}
    assert all(math.isfinite(r.rating) and math.isfinite(r.ci_low) and math.isfinite(r.ci_high) for r in board)
    assert board[0].model == "champ" and by["champ"].rating > by["b"].rating > by["c"].rating


def test_model_that_never_won_is_named_in_the_warning():
    battles = [_battle(f"p{i}", "a", "loser", "model_a") for i in range(4)]
    battles += [_battle(f"q{i}", "a", "b", "model_a" if i % 2 else "model_b") for i in range(6)]
    with pytest.warns(RatingWarning, match="never won: loser"):
        board = leaderboard(battles, bootstrap=0, prior_games=2.0)
    assert board[-1].model == "loser" and math.isfinite(board[-1].rating)


def test_battle_graph_in_pieces_is_warned_and_stays_finite():
    battles = [_battle(f"p{i}", "a", "b", "model_a" if i % 3 else "model_b") for i in range(9)]
    battles += [_battle(f"q{i}", "c", "d", "model_a" if i % 3 else "model_b") for i in range(9)]
    with pytest.warns(RatingWarning, match="2 pieces"):
        board = leaderboard(battles, bootstrap=20)
    assert all(math.isfinite(r.rating) for r in board)
    by = {r.model: r.rating for r in board}
    assert by["a"] > by["b"] and by["c"] > by["d"]


def test_no_warning_when_the_mle_exists(small_table):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RatingWarning)
        rate(small_table, bootstrap=30)


def test_fits_exist_is_strong_connectivity():
    wins = np.zeros((3, 3))
    wins[0, 1] = wins[1, 2] = 1  # 0 > 1 > 2 and nobody beats 0
    assert not fits_exist(wins)[0]
    wins[2, 0] = 1  # a cycle: every model won and lost inside one strongly connected graph
    assert fits_exist(wins)[0]
    ties = np.zeros((3, 3))
    wins2 = np.zeros((3, 3))
    wins2[0, 1] = 1
    ties[1, 2] = ties[2, 1] = 1
    ties[0, 2] = ties[2, 0] = 1
    assert fits_exist(wins2, ties)[0]
    assert not fits_exist(wins2, ties, tie_model="drop")[0]


def test_fit_counts_two_models_has_closed_form():
    # i beat j 30 times out of 40: theta_i - theta_j = log(30 / 10)
    wins = np.array([[0.0, 30.0], [10.0, 0.0]])
    theta, _ = fit_counts(wins)
    assert theta[0] - theta[1] == pytest.approx(math.log(3.0), abs=1e-12)
    assert theta.sum() == pytest.approx(0.0, abs=1e-12)


def test_unknown_options_and_anchor_raise_arena_errors(small_table):
    with pytest.raises(ArenaError, match="ties option"):
        rate(small_table, ties="coinflip")
    with pytest.raises(ArenaError, match="resample option"):
        rate(small_table, resample="judge")
    with pytest.raises(ArenaError, match="anchor model 'gpt-9'"):
        rate(small_table, anchor="gpt-9")
    with pytest.raises(ArenaError, match="against itself"):
        leaderboard([_battle("p", "a", "a", "tie")])
    with pytest.raises(ArenaError, match="no battles"):
        leaderboard([])


def _expected_cov_prompt_bootstrap(table, cells):
    """Mean and covariance of a prompt-bootstrap round's cell counts, from first principles."""
    x = np.zeros((table.n_prompts, cells.n_cells))
    np.add.at(x, (table.prompt, cells.battle_cell), 1.0)
    mean = x.mean(0)
    centred = x - mean
    return table.n_prompts * mean, table.n_prompts * centred.T @ centred / table.n_prompts


def doubled(table):
    """Every battle judged twice with the same verdict, both games in one prompt."""
    return BattleTable(
        table.models,
        np.repeat(table.model_a, 2),
        np.repeat(table.model_b, 2),
        np.repeat(table.outcome, 2),
        np.repeat(table.prompt, 2),
    )


@pytest.mark.parametrize("structure", ["many patterns", "few patterns"])
def test_prompt_bootstrap_counts_have_the_moments_of_resampling_prompts(structure):
    # many distinct prompts (4 random battles each) are drawn prompt by prompt; few
    # patterns (each prompt = one battle judged twice) by a multinomial over patterns
    rng = np.random.default_rng(5)
    if structure == "many patterns":
        table = simulate_table(np.linspace(900, 1100, 5), 4000, rng, per_prompt=4)
    else:
        table = doubled(simulate_table(np.linspace(900, 1100, 4), 3000, rng))
    cells = CellCounts.from_table(table)
    patterns = PromptPatterns.from_table(table, cells)
    assert patterns.n_prompts == table.n_prompts
    assert (patterns.multiplicity.shape[0] > 500) == (structure == "many patterns")
    mean, cov = _expected_cov_prompt_bootstrap(table, cells)
    draws = np.concatenate(list(bootstrap_counts(cells, patterns, 4000, np.random.default_rng(0), chunk=500)))
    se = np.sqrt(np.diag(cov) / draws.shape[0])
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se + 1e-9)
    emp = np.cov(draws.T)
    big = np.diag(cov) > 1.0
    np.testing.assert_allclose(np.diag(emp)[big], np.diag(cov)[big], rtol=0.15)


def test_prompt_bootstrap_does_not_depend_on_the_number_of_threads():
    table = simulate_table(np.linspace(900, 1100, 5), 3000, np.random.default_rng(6), per_prompt=3)
    cells = CellCounts.from_table(table)
    patterns = PromptPatterns.from_table(table, cells)

    def draw(threads, chunk):
        gen = bootstrap_counts(cells, patterns, 50, np.random.default_rng(1), chunk=chunk, threads=threads)
        return np.concatenate(list(gen))

    np.testing.assert_array_equal(draw(1, 50), draw(3, 50))


def test_prompt_bootstrap_widens_intervals_when_games_of_a_prompt_are_copies():
    # each prompt is judged twice with the same verdict: 2N battles carry N battles of
    # information, so honest intervals are sqrt(2) wider than the battle bootstrap's
    rng = np.random.default_rng(9)
    copies = doubled(simulate_table(np.linspace(850, 1150, 6), 3000, rng))
    by_prompt = rate(copies, bootstrap=400, resample="prompt")
    by_battle = rate(copies, bootstrap=400, resample="battle")
    ratio = np.mean(by_prompt.boot.std(0)) / np.mean(by_battle.boot.std(0))
    assert 1.25 < ratio < 1.6


def test_synthetic_arena_of_20_models_is_recovered_within_intervals():
    rng = np.random.default_rng(2024)
    true = rng.normal(0, 120, 20)
    true += 1000 - true.mean()
    table = simulate_table(true, 100_000, rng)
    names = np.array(table.models, dtype=object)
    outcome_names = np.array(["model_a", "model_b", "tie"])
    battles = [
        Battle(prompt_id=str(p), model_a=a, model_b=b, outcome=o)
        for p, a, b, o in zip(
            table.prompt.tolist(), names[table.model_a], names[table.model_b], outcome_names[table.outcome]
        )
    ]
    board = leaderboard(battles, bootstrap=100)
    covered = sum(r.ci_low <= true[int(r.model[1:])] <= r.ci_high for r in board)
    assert covered >= 17
    assert max(abs(r.rating - true[int(r.model[1:])]) for r in board) < 25
    assert [int(r.model[1:]) for r in board][:3] == list(np.argsort(-true)[:3])
    assert sum(r.battles for r in board) == 200_000


def test_bootstrap_intervals_cover_the_true_ratings_90_to_99_percent_of_the_time():
    # 200 independent arenas (20 models, 100k battles with ties), 100 bootstrap rounds each:
    # pooled over models, the 95% intervals must cover the truth 90-99% of the time
    rng = np.random.default_rng(77)
    true = rng.normal(0, 100, 20)
    true += 1000 - true.mean()
    hits = []
    for rep in range(200):
        table = simulate_table(true, 100_000, rng)
        result = rate(table, bootstrap=100, resample="battle", seed=rep)
        t = in_table_order(result, true)
        hits.append((result.ci_low <= t) & (t <= result.ci_high))
    coverage = float(np.mean(hits))
    assert 0.90 <= coverage <= 0.99, coverage


@pytest.mark.parametrize("ties", ["half", "drop", "davidson"])
def test_every_tie_option_gives_finite_intervals_around_the_point(small_table, ties):
    result = rate(small_table, bootstrap=40, ties=ties)
    assert np.all(np.isfinite(result.ci_low)) and np.all(np.isfinite(result.ci_high))
    assert np.all(result.ci_low <= result.median) and np.all(result.median <= result.ci_high)
    assert np.all(result.ci_low < result.ratings) and np.all(result.ratings < result.ci_high)
    assert (result.tie_param is not None) == (ties == "davidson")


def test_bootstrap_rounds_that_lose_a_models_only_loss_or_only_battle_are_reported():
    battles = [_battle(f"w{i}", "hero", "b", "model_a") for i in range(12)] + [_battle("l", "b", "hero", "model_a")]
    battles += [_battle(f"q{i}", "b", "c", "model_a" if i % 2 else "model_b") for i in range(20)]
    battles += [_battle("once", "rare", "c", "model_a"), _battle("twice", "c", "rare", "model_a")]
    with pytest.warns(RatingWarning) as caught:
        result = rate(BattleTable.from_battles(battles), bootstrap=200, resample="battle")
    messages = " ".join(str(w.message) for w in caught)
    assert "bootstrap rounds had a model that never won or never lost" in messages
    assert "left out every battle of some model" in messages
    assert not result.settings["prior_used"]  # the point estimate is the exact MLE
    assert np.all(np.isfinite(result.ci_low)) and np.all(np.isfinite(result.ci_high))
    rare = result.models.index("rare")
    assert np.isnan(result.boot[:, rare]).any() and not np.isnan(result.boot[:, rare]).all()


def _rare_model_battles():
    """Thirty prompts of a vs b, and one prompt (two battles) of a model called rare."""
    battles = [_battle(f"q{i}", "a", "b", "model_a" if i % 3 else "model_b") for i in range(30)]
    return [*battles, _battle("r", "rare", "a", "model_a"), _battle("r", "a", "rare", "model_a")]


def test_a_model_absent_from_every_bootstrap_round_has_no_interval_and_is_named():
    # Seed 21 draws the prompt "r" in none of the 3 rounds.
    with pytest.warns(RatingWarning) as caught:
        result = rate(BattleTable.from_battles(_rare_model_battles()), bootstrap=3, seed=21)
    assert any(str(w.message).startswith("rare: no battle in any of the 3 bootstrap rounds") for w in caught)
    assert np.isnan(result.boot[:, result.models.index("rare")]).all()
    board = {r.model: r for r in result.to_ratings()}
    assert board["rare"].ci_low is None and board["rare"].ci_high is None
    assert board["rare"].rank_ci is None and board["a"].rank_ci is not None
    assert all(math.isfinite(board[m].ci_low) and math.isfinite(board[m].ci_high) for m in ("a", "b"))
    assert any("rare: no battle" in note for note in result.warnings)


def test_anchored_bootstrap_is_the_free_bootstrap_relative_to_the_anchor_in_every_round():
    # One gauge for every round: a round is "rating minus the anchor's rating, plus
    # anchor_rating". A round that lost every battle of the anchor has no such numbers, so
    # it is NaN throughout, not centred on the mean as the other models' rounds would be.
    table = BattleTable.from_battles(_rare_model_battles())
    free = rate(table, bootstrap=200, seed=0)
    with pytest.warns(RatingWarning) as caught:
        anchored = rate(table, bootstrap=200, seed=0, anchor="rare", anchor_rating=1000.0)
    r = free.models.index("rare")
    lost = np.isnan(free.boot[:, r])
    assert 0 < lost.sum() < 200  # some rounds lack the anchor, most have it
    expected = free.boot - free.boot[:, [r]] + 1000.0
    np.testing.assert_allclose(anchored.boot, expected, atol=1e-8)
    assert np.isnan(anchored.boot[lost]).all()
    assert any(f"{lost.sum()} of 200 bootstrap rounds left out every battle of the anchor 'rare'" in str(w.message)
               for w in caught)
    lo, hi = np.nanquantile(expected, [0.025, 0.975], axis=0)
    np.testing.assert_allclose(anchored.ci_low, lo, atol=1e-8)
    np.testing.assert_allclose(anchored.ci_high, hi, atol=1e-8)


def test_a_line_search_that_finds_no_ascent_is_not_taken_for_convergence(monkeypatch, small_table):
    # A Newton direction that points downhill (as a wrong or indefinite Hessian would give):
    # no step length raises the likelihood. 40 halvings leave a tiny step, which must not
    # count as convergence while the gradient is far from 0.
    from arena_learning.rating import bt

    real = bt._newton_direction
    monkeypatch.setattr(bt, "_newton_direction", lambda neg, g: -real(neg, g))
    cells = CellCounts.from_table(small_table)
    w, t = cells.matrices(cells.counts[None, :].astype(np.float64))
    present = (w + w.transpose(0, 2, 1) + t).sum(-1) > 0
    theta, _, ok = bt._fit(w, t, "half", present, np.zeros(1))
    assert not ok.any()
    np.testing.assert_allclose(theta, 0.0, atol=1e-6)  # it went nowhere from the start
    with pytest.warns(RatingWarning, match="did not converge"):
        rate(small_table, bootstrap=0)


def test_a_round_already_at_the_optimum_converges_even_when_no_step_raises_the_likelihood(monkeypatch, small_table):
    from arena_learning.rating import bt

    cells = CellCounts.from_table(small_table)
    w, t = cells.matrices(cells.counts[None, :].astype(np.float64))
    present = (w + w.transpose(0, 2, 1) + t).sum(-1) > 0
    best, _, ok = bt._fit(w, t, "half", present, np.zeros(1))
    assert ok.all()
    real = bt._newton_direction
    calls = []

    def downhill_after_convergence(neg, g):
        # exact Newton steps; once the gradient is rounding noise, a long step downhill that
        # no halving rescues: the round must stay at the optimum and count as converged
        calls.append(float(np.abs(g).max()))
        step = real(neg, g)
        return -1e8 * np.sign(g) if calls[-1] < 1e-9 else step

    monkeypatch.setattr(bt, "_newton_direction", downhill_after_convergence)
    theta, _, ok = bt._fit(w, t, "half", present, np.zeros(1), tol=0.0)
    assert ok.all()
    np.testing.assert_allclose(theta, best, atol=1e-9)
