"""Style control: exact contextual Bradley-Terry, and a length-biased judge corrected."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from arena_learning.errors import ArenaError
from arena_learning.rating.bt import RatingWarning
from arena_learning.rating.counts import A_WINS, B_WINS, TIE, BattleTable
from arena_learning.rating.style import (
    STYLE_FEATURES,
    answer_style,
    normalised_difference,
    rate_style,
    style_control,
    style_features,
)
from arena_learning.records import Battle

ELO = 400.0 / math.log(10.0)


def biased_arena(rng, n=12_000, k=5, length_weight=1.2):
    """A judge that rewards length: model m00 writes twice as long but is no better."""
    true = np.linspace(-100, 100, k)
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    verbose = np.where(np.arange(k) == 0, 2.0, 1.0)
    len_a = rng.poisson(200 * verbose[a]).astype(float) + 1
    len_b = rng.poisson(200 * verbose[b]).astype(float) + 1
    bold_a = rng.poisson(1.0, n).astype(float)
    bold_b = rng.poisson(1.0, n).astype(float)
    nd = (len_a - len_b) / (len_a + len_b)
    z = (true[a] - true[b]) / ELO + length_weight * nd
    p = 1 / (1 + np.exp(-z))
    p_tie = 0.2 * 4 * p * (1 - p)
    u = rng.random(n)
    outcome = np.where(u < p - p_tie / 2, A_WINS, np.where(u < p + p_tie / 2, TIE, B_WINS)).astype(np.int8)
    names = np.array([f"m{i:02d}" for i in range(k)], dtype=object)
    table = BattleTable.from_arrays(names[a], names[b], outcome, np.arange(n) // 2)
    fa = np.stack([len_a, bold_a], 1)
    fb = np.stack([len_b, bold_b], 1)
    return table, fa, fb, true + 1000


def test_style_fit_equals_sklearn_logistic_regression_with_style_columns():
    table, fa, fb, _ = biased_arena(np.random.default_rng(1), n=4000)
    result = rate_style(table, fa, fb, feature_names=["length", "bold"], bootstrap=0)
    nd = normalised_difference(fa, fb)
    s = (nd - nd.mean(0)) / nd.std(0)
    n, k = table.n_battles, table.n_models
    x = np.zeros((n, k))
    x[np.arange(n), table.model_a] = 1
    x[np.arange(n), table.model_b] = -1
    x = np.hstack([x, s])
    tie = table.outcome == TIE
    y = (table.outcome == A_WINS).astype(float)
    y[tie] = 1
    x2 = np.vstack([x, x[tie]])
    y2 = np.concatenate([y, np.zeros(tie.sum())])
    w2 = np.concatenate([np.where(tie, 0.5, 1.0), np.full(tie.sum(), 0.5)])
    lr = LogisticRegression(fit_intercept=False, C=np.inf, tol=1e-14, max_iter=10_000, solver="newton-cg")
    lr.fit(x2, y2, sample_weight=w2)
    expected = lr.coef_[0][:k] * ELO
    expected += 1000 - expected.mean()
    assert np.abs(result.controlled.ratings - expected).max() < 1e-6
    np.testing.assert_allclose(result.coefficients, lr.coef_[0][k:], atol=1e-9)


def test_style_control_removes_a_length_bias_that_plain_ratings_keep():
    table, fa, fb, true = biased_arena(np.random.default_rng(2))
    result = rate_style(table, fa, fb, feature_names=["length", "bold"], bootstrap=40, resample="prompt")
    i = table.models.index("m00")
    true_m00 = true[0]
    # plain BT credits m00 for its length; with control it is back near its true rating
    assert result.plain.ratings[i] - true_m00 > 40
    assert abs(result.controlled.ratings[i] - true_m00) < 30
    length, bold = result.coefficients
    assert length > 0.1 and abs(bold) < 0.05
    assert result.coef_ci_low[0] > 0 and result.coef_ci_low[1] < 0 < result.coef_ci_high[1]
    lo, hi = result.controlled.ci_low[i], result.controlled.ci_high[i]
    assert lo < result.controlled.ratings[i] < hi
    rows = {r["model"]: r for r in result.to_rows()}
    assert rows["m00"]["delta"] == pytest.approx(result.controlled.ratings[i] - result.plain.ratings[i])
    assert rows["m00"]["rank"] < rows["m00"]["rank_controlled"]  # m00 drops once length is credited


def random_answer(rng, fancy: bool) -> str:
    words = " ".join(["word"] * int(rng.integers(5, 60)))
    if not fancy:
        return words
    parts = ["# Heading"] * int(rng.integers(0, 3)) + [words]
    parts += [f"- item {j}" for j in range(int(rng.integers(0, 5)))]
    parts += ["**key point**"] * int(rng.integers(0, 4))
    return "\n".join(parts)


def test_style_control_from_battle_records_and_texts():
    rng = np.random.default_rng(4)
    battles, fa, fb = [], [], []
    # "styled" formats its answers on odd prompts only; the judge prefers formatted answers
    for i in range(900):
        a, b = [("plain", "styled"), ("styled", "other"), ("other", "plain")][i % 3]
        fancy = {"plain": False, "other": False, "styled": bool((i // 3) % 2)}
        text = {m: random_answer(rng, fancy[m]) for m in (a, b)}
        p_a = 0.8 if fancy[a] else (0.2 if fancy[b] else 0.5)
        outcome = "model_a" if rng.random() < p_a else "model_b"
        battles.append(Battle(prompt_id=f"p{i // 3}", model_a=a, model_b=b, outcome=outcome))
        fa.append(answer_style(text[a]))
        fb.append(answer_style(text[b]))
    result = style_control(battles, np.array(fa), np.array(fb), bootstrap=0)
    assert result.feature_names == list(STYLE_FEATURES)
    # plain ratings credit "styled" for its formatting; controlled ones much less
    plain_gap = result.plain.rating_of("styled") - result.plain.rating_of("plain")
    controlled_gap = result.controlled.rating_of("styled") - result.controlled.rating_of("plain")
    assert plain_gap > 50 and abs(controlled_gap) < 30, (plain_gap, controlled_gap)
    assert sum(result.coefficients[1:]) > 0.5  # headers + lists + bold carry the preference


def test_style_that_only_follows_the_model_is_an_arena_error():
    battles, fa, fb = [], [], []
    for i in range(40):
        a, b = ("terse", "fancy") if i % 2 else ("fancy", "terse")
        battles.append(Battle(prompt_id=f"p{i}", model_a=a, model_b=b, outcome="model_a" if i % 3 else "model_b"))
        fa.append(answer_style("short" if a == "terse" else "a **much** longer answer"))
        fb.append(answer_style("short" if b == "terse" else "a **much** longer answer"))
    with pytest.raises(ArenaError, match="cannot separate the style features"):
        style_control(battles, np.array(fa), np.array(fb), bootstrap=0)


def test_answer_style_counts_markdown():
    text = "# Title\n## Sub\nSome **bold** and __also bold__ text.\n\n- one\n* two\n+ three\n1. four\n2) five\n#hashtag"
    length, headers, lists, bold = answer_style(text)
    assert (headers, lists, bold) == (2, 5, 2)
    assert length == len(text.split())
    np.testing.assert_array_equal(style_features(["a b", ""]), [[2, 0, 0, 0], [0, 0, 0, 0]])


def test_normalised_difference_is_zero_when_both_are_zero_and_rejects_bad_input():
    nd = normalised_difference(np.array([[3.0, 0.0]]), np.array([[1.0, 0.0]]))
    np.testing.assert_allclose(nd, [[0.5, 0.0]])
    with pytest.raises(ArenaError, match="negative"):
        normalised_difference(np.array([[-1.0]]), np.array([[1.0]]))
    table, fa, fb, _ = biased_arena(np.random.default_rng(3), n=500)
    with pytest.raises(ArenaError, match="davidson"):
        rate_style(table, fa, fb, feature_names=["length", "bold"], ties="davidson")


def test_features_constant_in_a_resample_do_not_make_the_bootstrap_singular():
    # Seen on a machine whose answers never had headers or bold: two features that differ in
    # one battle only are constant (collinear) in most bootstrap resamples. Every round must fit.
    rng = np.random.default_rng(3)
    n, k = 600, 3
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    outcome = rng.choice([A_WINS, B_WINS, TIE], n, p=[0.3, 0.2, 0.5]).astype(np.int8)
    names = np.array(["x", "y", "z"], dtype=object)
    table = BattleTable.from_arrays(names[a], names[b], outcome, np.arange(n))
    fa = np.zeros((n, 4))
    fb = np.zeros((n, 4))
    fa[:, 0] = rng.poisson(30, n) + 1
    fb[:, 0] = rng.poisson(30, n) + 1
    fa[0, 1] = 2.0  # headers: once
    fb[1, 3] = 1.0  # bold: once
    result = rate_style(table, fa, fb, bootstrap=60, seed=0)
    assert np.isfinite(result.controlled.ci_low).all() and np.isfinite(result.controlled.ci_high).all()
    assert not any("did not converge" in w for w in result.warnings)


def test_the_ridge_moves_identifiable_coefficients_negligibly():
    table, fa, fb, _ = biased_arena(np.random.default_rng(4), n=3000)
    got = rate_style(table, fa, fb, feature_names=["length", "bold"], bootstrap=0)
    assert got.coefficients[0] > 0.1  # the length bias is found, not shrunk away
    from arena_learning.rating import style as style_mod

    rows = style_mod._Rows.build(table, (normalised_difference(fa, fb) - normalised_difference(fa, fb).mean(0))
                                 / normalised_difference(fa, fb).std(0), "half")
    w = rows.base_weight[None, :]
    present = rows.present(w)
    _, beta0, ok0 = style_mod._fit_contextual(rows, w, present, np.zeros(1), ridge=0.0)
    _, beta1, ok1 = style_mod._fit_contextual(rows, w, present, np.zeros(1), ridge=1e-9)
    assert ok0.all() and ok1.all()
    assert np.allclose(beta0, beta1, rtol=1e-6, atol=1e-10)


def test_plain_and_controlled_bootstraps_share_each_rounds_resample():
    # With style features that never differ, control changes nothing: if both bootstraps fit
    # round r on the same resample, their rounds are equal and the difference interval is 0.
    table, fa, fb, _ = biased_arena(np.random.default_rng(5), n=1500)
    same = np.ones_like(fa)
    for resample in ("prompt", "battle"):
        result = rate_style(table, same, same, feature_names=["length", "bold"], bootstrap=30, resample=resample,
                            seed=3, max_chunk_elems=20_000)  # several chunks
        np.testing.assert_allclose(result.controlled.boot, result.plain.boot, atol=1e-6)
        lo, hi = result.delta_interval()
        np.testing.assert_allclose(lo, 0.0, atol=1e-6)
        np.testing.assert_allclose(hi, 0.0, atol=1e-6)


def test_the_controlled_minus_plain_difference_has_a_paired_interval():
    table, fa, fb, _ = biased_arena(np.random.default_rng(2), n=6000)
    result = rate_style(table, fa, fb, feature_names=["length", "bold"], bootstrap=60, seed=1)
    i = table.models.index("m00")
    lo, hi = np.quantile(result.controlled.boot[:, i] - result.plain.boot[:, i], [0.025, 0.975])
    row = {r["model"]: r for r in result.to_rows()}["m00"]
    assert (row["delta_ci_low"], row["delta_ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert row["delta_ci_low"] < row["delta"] < row["delta_ci_high"] < 0  # control takes m00's length credit away
    assert rate_style(table, fa, fb, feature_names=["length", "bold"], bootstrap=0).to_rows()[0]["delta_ci_low"] is None


RARE_SEED = 0  # draws the prompt of "rare" in none of 3 rounds


def _rare_model_arena():
    """Forty prompts of a vs b (lengths vary), and one prompt (two battles) of a model called rare."""
    rng = np.random.default_rng(0)
    names_a = ["a"] * 40 + ["rare", "a"]
    names_b = ["b"] * 40 + ["a", "rare"]
    outcome = np.array([A_WINS if i % 3 else B_WINS for i in range(40)] + [A_WINS, A_WINS], dtype=np.int8)
    prompts = np.array([*range(40), 40, 40])
    table = BattleTable.from_arrays(np.array(names_a, dtype=object), np.array(names_b, dtype=object), outcome,
                                    prompts)
    fa = rng.integers(50, 300, (42, 1)).astype(float)
    fb = rng.integers(50, 300, (42, 1)).astype(float)
    return table, fa, fb


def test_a_model_absent_from_every_round_of_style_control_is_named_as_in_the_plain_bootstrap():
    # the controlled and the plain bootstraps end in the same summary (bt.summarize_bootstrap): a model in
    # none of the rounds has no interval in either, and both warn it by name
    table, fa, fb = _rare_model_arena()
    with pytest.warns(RatingWarning) as caught:
        result = rate_style(table, fa, fb, feature_names=["length"], bootstrap=3, seed=RARE_SEED)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("rare: no battle in any of the 3 bootstrap rounds, so no interval") for m in messages)
    assert any(m.startswith("rare: no battle in any of the 3 bootstrap rounds, so no style-controlled interval")
               for m in messages)
    assert any("no style-controlled interval" in note for note in result.warnings)
    board = {r.model: r for r in result.controlled.to_ratings()}
    assert board["rare"].ci_low is None and board["rare"].rank_ci is None
    assert board["a"].ci_low is not None


def test_bootstrap_rounds_of_style_control_that_did_not_converge_are_counted(monkeypatch):
    # as bt counts its rounds that did not converge, so does style control (it used to drop the flags)
    from arena_learning.rating import style

    fit = style._fit_contextual

    def two_rounds_fail(rows, weights, present, prior, ridge=0.0):
        theta, beta, ok = fit(rows, weights, present, prior, ridge=ridge)
        if weights.shape[0] > 1:  # a chunk of bootstrap rounds, not the point fit
            ok = ok.copy()
            ok[:2] = False
        return theta, beta, ok

    monkeypatch.setattr(style, "_fit_contextual", two_rounds_fail)
    table, fa, fb, _ = biased_arena(np.random.default_rng(5), n=1500)
    result = rate_style(table, fa, fb, feature_names=["length", "bold"], bootstrap=10, seed=0)
    assert "2 style-controlled bootstrap round(s) did not converge" in result.warnings
    assert not any("did not converge" in w for w in result.plain.warnings)
