"""Length control where it matters most (issue 21 item 12): synthetic battles with a known length bias and
known quality, including a copy of the reference padded to be longer on every prompt and a truncated copy
shorter on every prompt. The pooled length slope (the default) puts every LC estimate within 3 points of the
truth; the per-model form misses the padded and truncated copies by 8-13 points, and says so."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import expit

from arena_learning.errors import ArenaError
from arena_learning.rating.lengthcontrol import lc_win_rates
from arena_learning.records import Battle

# model: (quality in log-odds against the reference, mean extra length in characters; None: a copy below)
MODELS = {"m1": (-1.0, -200), "m2": (-0.5, -100), "m3": (0.0, 0), "m4": (0.3, 100), "m5": (0.6, 200),
          "m6": (1.0, 300), "padded": (0.0, None), "truncated": (0.0, None)}


def world(n: int, seed: int, scale: float = 400.0, bias: float = 1.2):
    """Return (battles, lengths, truth): the judge prefers the model with probability
    expit(quality + difficulty(prompt) + bias * tanh(length difference / scale)); the truth is the LC win rate
    that definition gives with no length difference, averaged over prompts (percent)."""
    rng = np.random.default_rng(seed)
    ref = rng.uniform(600, 1400, n)
    difficulty = rng.normal(0, 0.8, n)
    deltas = {m: rng.normal(mu, 300, n) for m, (_, mu) in MODELS.items() if mu is not None}
    deltas["padded"] = 600 + np.abs(rng.normal(0, 150, n))  # the reference padded: longer on every prompt
    deltas["truncated"] = -(300 + np.abs(rng.normal(0, 100, n)))  # the reference cut: shorter on every prompt
    lengths = {(f"p{i}", "ref"): float(ref[i]) for i in range(n)}
    battles, truth = [], {}
    for m, (quality, _) in MODELS.items():
        delta = deltas[m]
        won = rng.random(n) < expit(quality + difficulty + bias * np.tanh(delta / scale))
        truth[m] = 100.0 * float(expit(quality + difficulty).mean())
        for i in range(n):
            lengths[(f"p{i}", m)] = float(ref[i] + delta[i])
            a, b = (m, "ref") if i % 2 else ("ref", m)
            battles.append(Battle(prompt_id=f"p{i}", model_a=a, model_b=b,
                                  outcome="model_a" if won[i] == (a == m) else "model_b"))
    return battles, lengths, truth


def test_pooled_length_slope_puts_every_lc_estimate_within_3_points_of_the_truth():
    battles, lengths, truth = world(3000, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = {r.model: r for r in lc_win_rates(battles, lengths, "ref", bootstrap=0)}
    errors = {m: rows[m].lc_win_rate - truth[m] for m in MODELS}
    assert max(abs(e) for e in errors.values()) < 3.0, errors
    # the raw win rate of the padded copy is far above its truth (50%: it is the reference), the LC one is not
    assert rows["padded"].win_rate - truth["padded"] > 15 and rows["truncated"].win_rate - truth["truncated"] < -10
    # one slope, the judge's, for every model
    assert len({round(r.length_coef, 9) for r in rows.values()}) == 1 and rows["m1"].length_slope == "pooled"
    assert rows["m1"].length_coef == pytest.approx(1.2, abs=0.3)
    # the copies are named: their own battles cannot identify a length slope
    assert sorted(m for m, r in rows.items() if not r.length_identified) == ["padded", "truncated"]
    (w,) = [w for w in caught if issubclass(w.category, UserWarning)]
    assert "padded, truncated is not identified" in str(w.message) and "pooled over the other models" in str(w.message)


def test_the_per_model_slope_misses_the_copies_and_says_so():
    battles, lengths, truth = world(3000, seed=0)
    with pytest.warns(UserWarning, match="padded, truncated is not identified.*unreliable"):
        rows = {r.model: r for r in lc_win_rates(battles, lengths, "ref", bootstrap=0, length_slope="per-model")}
    assert rows["padded"].lc_win_rate - truth["padded"] > 8  # AlpacaEval's per-model form, as issue 21 measured
    assert rows["truncated"].lc_win_rate - truth["truncated"] < -6
    assert max(abs(rows[m].lc_win_rate - truth[m]) for m in ("m1", "m2", "m4", "m5", "m6")) < 3.0
    with pytest.raises(ArenaError, match="unknown length slope 'shared'"):
        lc_win_rates(battles, lengths, "ref", bootstrap=0, length_slope="shared")


def test_pooled_bootstrap_intervals_cover_the_truth_of_the_copies():
    battles, lengths, truth = world(600, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rows = {r.model: r for r in lc_win_rates(battles, lengths, "ref", bootstrap=30, seed=1)}
    for m in ("padded", "truncated", "m3"):
        r = rows[m]
        assert r.lc_low < r.lc_win_rate < r.lc_high and r.lc_low - 2 <= truth[m] <= r.lc_high + 2, (m, r, truth[m])
        assert r.win_low < r.win_rate < r.win_high
