"""Style and length control: Bradley-Terry with features of the two answers.

As Chatbot Arena does (lmsys.org/blog/2024-08-28-style-control), the logistic model gets,
next to the model terms, one term per style feature: the normalised difference
(a - b) / (a + b) of the two answers' counts (length, markdown headers, list items, bold
spans), standardised over the battles. The model coefficients are then the ratings
"with style controlled": what is left of a model's wins once longer, more formatted answers
are credited to their style. The style coefficients say how much the judge rewards each.

Features are continuous, so battles cannot be reduced to cell counts here; the fit is a
Newton method on per-battle rows whose Hessian is assembled block by block (model-model
by pair aggregation, model-style and style-style by sparse products) so that a chunk of
bootstrap rounds is still fitted as one batch.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_expit

from ..errors import ArenaError
from ..records import Battle
from .bt import (
    TIE_CHOICES,
    BTResult,
    RateOptions,
    _fit_exists,
    _gauge,
    _model_counts,
    _warn,
    damped_step,
    ranks,
    rate,
    summarize_bootstrap,
)
from .counts import A_WINS, TIE, BattleTable, CellCounts

STYLE_FEATURES = ("length", "headers", "lists", "bold")
"""Names of the columns ``answer_style`` returns, in order."""

_HEADER = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")


def answer_style(text: str) -> tuple[float, float, float, float]:
    """Return (length, headers, lists, bold) counts of one answer.

    length is in whitespace-separated words (a tokenizer-free stand-in for tokens: the
    normalised difference is nearly the same); headers are markdown ``#`` lines; lists
    are ``-``, ``*``, ``+`` or ``1.`` items; bold are ``**...**`` or ``__...__`` spans.
    """
    return (
        float(len(text.split())),
        float(len(_HEADER.findall(text))),
        float(len(_LIST_ITEM.findall(text))),
        float(len(_BOLD.findall(text))),
    )


def style_features(texts: Sequence[str]) -> np.ndarray:
    """Return float64 (n, 4): ``answer_style`` of each text (for multi-turn, join the turns)."""
    return np.array([answer_style(t) for t in texts], dtype=np.float64).reshape(len(texts), len(STYLE_FEATURES))


def normalised_difference(features_a: np.ndarray, features_b: np.ndarray) -> np.ndarray:
    """Return float64 (N, F): (a - b) / (a + b), 0 where both are 0."""
    fa = np.asarray(features_a, dtype=np.float64)
    fb = np.asarray(features_b, dtype=np.float64)
    if fa.shape != fb.shape or fa.ndim != 2:
        raise ArenaError(
            f"style features must be two (battles, features) arrays of one shape, got {fa.shape} and {fb.shape}")
    if (fa < 0).any() or (fb < 0).any():
        raise ArenaError("style features are counts and must not be negative")
    total = fa + fb
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (fa - fb) / total, 0.0)


@dataclass
class StyleResult:
    """Ratings with and without style control, and the style coefficients.

    Attributes:
        controlled: ratings with the style terms in the model.
        plain: the ordinary Bradley-Terry ratings of the same battles and options.
        feature_names: the F style features.
        coefficients: float64 (F,), log-odds per standard deviation of each feature's
            normalised difference (positive: the judge prefers more of it); 0 for a
            feature that never differs.
        coef_ci_low, coef_ci_high: float64 (F,) bootstrap interval, None without bootstrap.
    """

    controlled: BTResult
    plain: BTResult
    feature_names: list[str]
    coefficients: np.ndarray
    coef_ci_low: np.ndarray | None = None
    coef_ci_high: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)

    def coefficient_table(self) -> dict[str, float]:
        return dict(zip(self.feature_names, (float(c) for c in self.coefficients)))

    def delta_interval(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Return float64 (K,) bounds of controlled minus plain rating, in table order.

        Quantiles (``ci`` of the settings) of the per-round difference: round r of both
        bootstraps is fitted on the same resample. (None, None) without bootstrap; NaN for a
        model absent from every round.
        """
        cb, pb = self.controlled.boot, self.plain.boot
        if cb is None or pb is None:
            return None, None
        alpha = (1.0 - float(self.controlled.settings.get("ci", 0.95))) / 2.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column: no interval
            lo, hi = np.nanquantile(cb - pb, [alpha, 1.0 - alpha], axis=0)
        return lo, hi

    def to_rows(self) -> list[dict[str, object]]:
        """Return one dict per model for a report, best controlled rating first.

        Keys: model, rating, ci_low, ci_high, rank (without control), rating_controlled,
        ci_low_controlled, ci_high_controlled, rank_controlled, delta (controlled minus plain)
        and delta_ci_low, delta_ci_high: the interval of delta over the bootstrap rounds (both
        fits see the same resample in a round), None without bootstrap.
        """
        plain = {r.model: r for r in self.plain.to_ratings()}
        lo, hi = self.delta_interval()
        index = {m: i for i, m in enumerate(self.controlled.models)}
        rows = []
        for r in self.controlled.to_ratings():
            p = plain[r.model]
            i = index[r.model]
            rows.append(
                {
                    "model": r.model,
                    "rating": p.rating,
                    "ci_low": p.ci_low,
                    "ci_high": p.ci_high,
                    "rank": p.rank,
                    "rating_controlled": r.rating,
                    "ci_low_controlled": r.ci_low,
                    "ci_high_controlled": r.ci_high,
                    "rank_controlled": r.rank,
                    "delta": r.rating - p.rating,
                    "delta_ci_low": None if lo is None or not np.isfinite(lo[i]) else float(lo[i]),
                    "delta_ci_high": None if hi is None or not np.isfinite(hi[i]) else float(hi[i]),
                }
            )
        return rows


def style_control(
    battles: Sequence[Battle],
    features_a: np.ndarray,
    features_b: np.ndarray,
    options: RateOptions | None = None,
    *,
    feature_names: Sequence[str] = STYLE_FEATURES,
    **overrides: Any,
) -> StyleResult:
    """Return ratings with and without style control for ``battles``.

    Args:
        battles: N battles.
        features_a, features_b: float (N, F) non-negative counts of model_a's and
            model_b's answer in each battle (``style_features`` makes them from texts).
        feature_names: F names.
        options, overrides: the ``bt.RateOptions`` and options set by name, as ``rate_style``.
    """
    if len(battles) != np.asarray(features_a).shape[0]:
        raise ArenaError(
            f"style features have {np.asarray(features_a).shape[0]} rows for {len(battles)} battles: "
            "give one row per battle"
        )
    table = BattleTable.from_battles(battles)
    weight = np.array([b.weight for b in battles])  # a battle of weight w is w rows of the table
    if (weight != 1).any():
        features_a, features_b = np.repeat(features_a, weight, axis=0), np.repeat(features_b, weight, axis=0)
    return rate_style(table, features_a, features_b, options, feature_names=feature_names, **overrides)


def rate_style(
    table: BattleTable,
    features_a: np.ndarray,
    features_b: np.ndarray,
    options: RateOptions | None = None,
    *,
    feature_names: Sequence[str] = STYLE_FEATURES,
    max_chunk_elems: int = 8_000_000,
    **overrides: Any,
) -> StyleResult:
    """Return style-controlled and plain ratings of ``table`` (options and overrides as ``bt.rate``).

    ``ties="davidson"`` is not available with style control (use "half" or "drop").
    """
    o = RateOptions.build(options, **overrides)
    if o.ties not in TIE_CHOICES or o.ties == "davidson":
        raise ArenaError(f"style control supports ties='half' or 'drop', not {o.ties!r}")
    models = list(table.models)
    o.check(models)
    diff = normalised_difference(features_a, features_b)
    if diff.shape[0] != table.n_battles:
        raise ArenaError(f"style features have {diff.shape[0]} rows for {table.n_battles} battles")
    names = list(feature_names)
    if len(names) != diff.shape[1]:
        raise ArenaError(f"{len(names)} feature names for {diff.shape[1]} feature columns")
    notes: list[str] = []

    # standardise each feature over battles; a constant feature carries no information
    # and would make the Hessian singular, so it is dropped (coefficient reported as 0)
    mean = diff.mean(axis=0)
    std = diff.std(axis=0)
    used = std > 0
    for name in (n for n, u in zip(names, used) if not u):
        notes.append(f"style feature {name!r} never differs between the two answers; it is left out")
    s_all = np.zeros_like(diff)
    s_all[:, used] = (diff[:, used] - mean[used]) / std[used]
    s = s_all[:, used]

    rows = _Rows.build(table, s, o.ties)
    k = table.n_models
    elo_per_unit = o.elo_per_unit
    chunk = max(1, max_chunk_elems // max(1, rows.n * max(1, s.shape[1]), table.n_battles))

    def multiplier_chunks():
        """Yield float64 (r, N) battle multipliers per chunk; the same for a given seed, every call."""
        rng = np.random.default_rng(o.seed)
        for start in range(0, o.bootstrap, chunk):
            yield _battle_multipliers(table, rng, min(chunk, o.bootstrap - start), o.resample)

    # The plain ratings are fitted on the very resamples the controlled ones get below
    # (regenerated from the same seed), so that in each round the two differ only by the
    # style terms and the controlled-minus-plain difference has a meaningful interval.
    cells = CellCounts.from_table(table)
    cell_of_battle = sp.csr_matrix(
        (np.ones(table.n_battles), (cells.battle_cell, np.arange(table.n_battles))),
        shape=(cells.n_cells, table.n_battles),
    )
    plain = rate(table, o, resampled_counts=(np.asarray((cell_of_battle @ m.T).T) for m in multiplier_chunks()))

    weights = rows.base_weight[None, :]
    present = rows.present(weights)
    _check_identifiable(rows, weights[0], present[0], [n for n, u in zip(names, used) if u])
    connected = _fit_exists(rows.win_matrix(weights), np.zeros((1, k, k)), "half", present)
    use_prior = not bool(connected[0])
    if use_prior:
        msg = (
            "exact style-controlled ratings do not exist (a model never won or never lost, or the battle "
            f"graph is in pieces); a prior of {o.prior_games:g} virtual games per model keeps them finite"
        )
        _warn(notes, msg)
    theta, beta, ok = _fit_contextual(rows, weights, present, np.full(1, o.prior_games if use_prior else 0.0))
    if not ok.all():
        notes.append("the style-controlled fit did not converge; ratings may be inexact")
    point = _gauge(theta * elo_per_unit, present, models, o.anchor, o.anchor_rating, o.initial, None)[0]
    coefficients = np.zeros(len(names))
    coefficients[used] = beta[0]

    boot = median = lo = hi = rank_ci = None
    coef_lo = coef_hi = None
    if o.bootstrap > 0:
        parts, coef_parts = [], []
        unconverged = 0
        for battle_mult in multiplier_chunks():
            rc = battle_mult.shape[0]
            bw = rows.base_weight[None, :] * battle_mult[:, rows.battle]
            bpresent = rows.present(bw)
            if use_prior:
                bprior = np.full(rc, o.prior_games)
            else:
                bconn = _fit_exists(rows.win_matrix(bw), np.zeros((rc, k, k)), "half", bpresent)
                bprior = np.where(bconn, 0.0, o.prior_games)
            bth, bbeta, bok = _fit_contextual(rows, bw, bpresent, bprior, ridge=1e-9)
            unconverged += int((~bok).sum())
            elo = bth * elo_per_unit
            elo[~bpresent] = np.nan
            parts.append(_gauge(elo, bpresent, models, o.anchor, o.anchor_rating, o.initial, point))
            full = np.zeros((rc, len(names)))
            full[:, used] = bbeta
            coef_parts.append(full)
        boot = np.concatenate(parts)
        coefs = np.concatenate(coef_parts)
        summary = summarize_bootstrap(boot, models, o.ci, notes, unconverged=unconverged, fit="style-controlled ")
        median, lo, hi, rank_ci = summary.median, summary.ci_low, summary.ci_high, summary.rank_ci
        alpha = (1.0 - o.ci) / 2.0
        coef_lo, coef_hi = np.quantile(coefs, [alpha, 1.0 - alpha], axis=0)

    wins, losses, tie_counts, battles = _model_counts(table)
    controlled = BTResult(
        models=models,
        ratings=point,
        boot=boot,
        median=median,
        ci_low=lo,
        ci_high=hi,
        rank=ranks(point),
        rank_ci=rank_ci,
        wins=wins,
        losses=losses,
        ties=tie_counts,
        battles=battles,
        warnings=notes,
        settings={**plain.settings, "style_features": names, "prior_used": use_prior},
    )
    return StyleResult(controlled, plain, names, coefficients, coef_lo, coef_hi, notes)


@dataclass(frozen=True)
class _Rows:
    """The logistic-regression rows of the style fit.

    A decisive battle is one row (y = 1 if model_a won); with ``ties="half"`` a tie is
    two rows, y = 1 and y = 0, each of weight 1/2. Arrays are (n,) unless stated.
    """

    k: int
    a: np.ndarray  # int64, model_a index
    b: np.ndarray  # int64, model_b index
    y: np.ndarray  # float64, 1 = model_a won
    style: np.ndarray  # float64 (n, F), standardised normalised differences
    base_weight: np.ndarray  # float64
    battle: np.ndarray  # int64, battle (table row) of each row
    prompt: np.ndarray  # int64, prompt code of each row
    n_battles: int
    n_prompts: int
    design: sp.csr_matrix  # (n, K): +1 at a, -1 at b
    pair: sp.csr_matrix  # (n, K*K): 1 at a*K + b
    win_flat: sp.csr_matrix  # (n, K*K): the row's win, winner*K + loser

    @property
    def n(self) -> int:
        return int(self.a.shape[0])

    @classmethod
    def build(cls, table: BattleTable, style: np.ndarray, ties: str) -> _Rows:
        o = table.outcome
        idx = np.arange(table.n_battles)
        decisive = idx[o != TIE]
        tie_idx = idx[o == TIE]
        if ties == "half":
            battle = np.concatenate([decisive, tie_idx, tie_idx])
            y = np.concatenate(
                [(o[decisive] == A_WINS).astype(np.float64), np.ones(tie_idx.size), np.zeros(tie_idx.size)])
            w = np.concatenate([np.ones(decisive.size), np.full(2 * tie_idx.size, 0.5)])
        else:
            battle = decisive
            y = (o[decisive] == A_WINS).astype(np.float64)
            w = np.ones(decisive.size)
        if battle.size == 0:
            raise ArenaError("no decisive battles to rate with ties='drop'")
        k = table.n_models
        a = table.model_a[battle].astype(np.int64)
        b = table.model_b[battle].astype(np.int64)
        n = battle.size
        rows = np.arange(n)
        design = sp.csr_matrix(
            (np.concatenate([np.ones(n), -np.ones(n)]), (np.concatenate([rows, rows]), np.concatenate([a, b]))),
            shape=(n, k),
        )
        pair = sp.csr_matrix((np.ones(n), (rows, a * k + b)), shape=(n, k * k))
        winner = np.where(y == 1, a, b)
        loser = np.where(y == 1, b, a)
        win_flat = sp.csr_matrix((np.ones(n), (rows, winner * k + loser)), shape=(n, k * k))
        return cls(
            k, a, b, y, style[battle], w, battle, table.prompt[battle], table.n_battles, table.n_prompts,
            design, pair, win_flat,
        )

    def present(self, weights: np.ndarray) -> np.ndarray:
        """Return bool (R, K): models with positive weight in each round (weights (R, n))."""
        return np.asarray((abs(self.design).T @ weights.T).T) > 0

    def win_matrix(self, weights: np.ndarray) -> np.ndarray:
        """Return float64 (R, K, K) of weighted wins (a tie row is a half win each way)."""
        return np.asarray((self.win_flat.T @ weights.T).T).reshape(-1, self.k, self.k)



def _battle_multipliers(table: BattleTable, rng: np.random.Generator, rounds: int, how: str) -> np.ndarray:
    """Return float64 (rounds, N): how many times each battle is drawn in each bootstrap round.

    ``how="battle"`` draws N battles with replacement; ``"prompt"`` draws P prompts with
    replacement and every battle of a prompt comes with it.
    """
    if how == "battle":
        n = table.n_battles
        return rng.multinomial(n, np.full(n, 1.0 / n), size=rounds).astype(np.float64)
    p = table.n_prompts
    m = rng.multinomial(p, np.full(p, 1.0 / p), size=rounds)
    return m[:, table.prompt].astype(np.float64)


def _check_identifiable(rows: _Rows, weights: np.ndarray, present: np.ndarray, names: list[str]) -> None:
    """Raise ArenaError when the style columns cannot be told apart from the model columns.

    At p = 1/2 the Hessian is X^T W X / 4; its only null direction may be the gauge
    (every present model shifted together). Any other means some mix of style features
    is a mix of model identities (e.g. a model always writes the longer answer).
    """
    k = rows.k
    x = sp.hstack([rows.design, sp.csr_matrix(rows.style)]).tocsr()
    gram = np.asarray((x.T @ sp.diags(weights) @ x).todense())
    u = np.concatenate([present.astype(np.float64), np.zeros(rows.style.shape[1])])
    scale = max(np.abs(np.diag(gram)).max(), 1e-300)
    gram += scale * np.outer(u, u) / max(u.sum(), 1.0)
    free = np.concatenate([present, np.ones(rows.style.shape[1], dtype=bool)])
    eig = np.linalg.eigvalsh(gram[np.ix_(free, free)])
    if eig[0] <= 1e-9 * scale:
        raise ArenaError(
            "style control cannot separate the style features (" + ", ".join(names) + ") from each other or "
            f"from the {k} models: in these battles some feature difference is fixed by the others or by which "
            "models meet (e.g. one model always writes the longer answer); rate without style control, use fewer "
            "features, or add prompts whose answers vary in style"
        )


def _fit_contextual(
    rows: _Rows,
    weights: np.ndarray,
    present: np.ndarray,
    prior: np.ndarray,
    *,
    max_iter: int = 100,
    tol: float = 1e-10,
    ridge: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit R weighted logistic regressions; return theta (R, K), beta (R, F), converged (R,).

    Args:
        weights: float64 (R, n) row weights per round.
        present: bool (R, K); prior: float64 (R,) virtual games per model (0 = exact).
        ridge: an L2 penalty on beta of ``ridge`` x the round's total weight (bootstrap rounds use
            1e-9: it moves identifiable coefficients by about 4e-9 of their size and keeps the Newton
            system regular when features are collinear in a resample).
    A feature that is constant in a round (e.g. no answer drawn into a bootstrap resample has
    bold text) carries no information there and would make the system singular: it is held at 0
    in that round, as an absent model is. The gauge is handled as in ``bt._fit``. A round whose
    line search finds no ascent is not reported as converged unless its gradient is already zero.
    """
    r = weights.shape[0]
    k = rows.k
    s = rows.style
    f = s.shape[1]
    d = k + f
    ss = (s[:, :, None] * s[:, None, :]).reshape(rows.n, f * f)
    design_t = rows.design.T.tocsr()
    pair_t = rows.pair.T.tocsr()
    u = present.astype(np.float64)
    gauge = (prior == 0)[:, None, None] * (u[:, :, None] * u[:, None, :])
    total = np.maximum(weights.sum(1, keepdims=True), 1e-300)
    mean_s = (weights @ s) / total
    var_s = (weights @ (s * s)) / total - mean_s**2
    varies = var_s > 1e-12 * np.maximum(1.0, mean_s**2)
    free = np.concatenate([present, varies], axis=1)
    eye = np.eye(d)
    y = rows.y[None, :]
    lam = ridge * weights.sum(1)  # (R,)
    sign = 2.0 * y - 1.0  # y is 0/1, so log-likelihood of a row is log_expit(sign * z)

    def logits(par: np.ndarray) -> np.ndarray:
        th, be = par[:, :k], par[:, k:]
        return th[:, rows.a] - th[:, rows.b] + be @ s.T  # (R, n)

    def loglik(par: np.ndarray) -> np.ndarray:
        z = logits(par)
        th = par[:, :k]
        ll = (weights * log_expit(sign * z)).sum(1) - 0.5 * lam * (par[:, k:] ** 2).sum(1)
        return ll + prior * 0.5 * (log_expit(th) + log_expit(-th)).sum(1)

    def derivatives(par: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = logits(par)
        p = expit(z)
        resid = weights * (y - p)
        v = weights * p * (1 - p)
        grad = np.empty((r, d))
        grad[:, :k] = np.asarray(design_t @ resid.T).T
        grad[:, k:] = resid @ s - lam[:, None] * par[:, k:]
        neg = np.empty((r, d, d))
        vp = np.asarray(pair_t @ v.T).T.reshape(r, k, k)
        vp = vp + vp.transpose(0, 2, 1)
        neg[:, :k, :k] = vp.sum(2)[:, :, None] * np.eye(k) - vp
        ms = design_t @ (v.T[:, :, None] * s[:, None, :]).reshape(rows.n, r * f)
        ms = np.asarray(ms).reshape(k, r, f).transpose(1, 0, 2)
        neg[:, :k, k:] = ms
        neg[:, k:, :k] = ms.transpose(0, 2, 1)
        neg[:, k:, k:] = (v @ ss).reshape(r, f, f) + lam[:, None, None] * np.eye(f)
        th = par[:, :k]
        sg = expit(th)
        grad[:, :k] += prior[:, None] * (0.5 - sg)
        neg[:, np.arange(k), np.arange(k)] += prior[:, None] * sg * (1 - sg)
        return grad, neg

    par = np.zeros((r, d))
    ll = loglik(par)
    converged = np.zeros(r, dtype=bool)
    failed = np.zeros(r, dtype=bool)
    for _ in range(max_iter):
        grad, neg = derivatives(par)
        c = np.maximum(np.abs(np.diagonal(neg, axis1=1, axis2=2)).max(1), 1e-12)
        neg[:, :k, :k] += c[:, None, None] * gauge
        neg = np.where(free[:, :, None] & free[:, None, :], neg, 0.0) + (~free)[:, :, None] * eye
        step = np.linalg.solve(neg, np.where(free, grad, 0.0)[:, :, None])[:, :, 0]
        step[converged] = 0.0
        # a stuck round (no step length raised the likelihood) stays put, and is not called converged
        t, stuck, ll_new = damped_step(loglik, par, step, ll)
        par = par + t[:, None] * step
        ll = ll_new
        flat = np.abs(np.where(free, grad, 0.0)).max(1) <= 1e-8 * np.maximum(1.0, np.abs(ll))
        # judged on the full Newton step, as in ``bt._fit``: a step halved to nothing is no progress
        converged |= np.where(stuck, flat, np.abs(step).max(1) <= tol)
        failed |= stuck & ~flat
        if (converged | failed).all():
            break
    th = par[:, :k]
    th = th - (np.where(present, th, 0.0).sum(1) / np.maximum(present.sum(1), 1))[:, None]
    return np.where(present, th, 0.0), par[:, k:], converged
