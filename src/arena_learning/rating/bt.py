"""Bradley-Terry ratings on counts, with a vectorised bootstrap.

The model: P(i beats j) = 1 / (1 + base ** ((R_j - R_i) / scale)), i.e. a logistic
model on the natural-unit strengths theta = R * ln(base) / scale. Battles are reduced to
pair counts first (``counts.py``) and the maximum-likelihood ratings are found by Newton's
method on those counts; every bootstrap round is the same fit on resampled counts, and
all rounds of a chunk are fitted together as one batch of small K x K Newton systems.

Ties:

* ``"half"`` (default, as FastChat and the WizardArena paper): a tie is half a win for each side.
* ``"drop"``: ties are left out of the fit (they still show in the tie counts).
* ``"davidson"``: Davidson's tie model, P(tie) = nu * sqrt(p_i p_j) / (p_i + p_j + nu sqrt(p_i p_j)),
  with the tie propensity nu fitted too.

Ratings are only defined up to a shift. With no anchor the mean rating is ``initial``
(the minimum-norm solution a logistic regression without intercept also finds); with an
anchor, that model is fixed at ``anchor_rating`` in the point estimate and in every
bootstrap round, so an interval is one of "rating relative to the anchor". A bootstrap
round that drew none of the anchor's battles has no such ratings: it is left out of every
interval (and counted in a warning).

When the maximum-likelihood ratings do not exist (a model that never won or never lost,
or a battle graph in several pieces), a ``RatingWarning`` names the models and the fit
adds ``prior_games`` virtual games, half won and half lost, between every model and a
reference at the centre, which keeps every rating finite.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import ArenaError
from ..records import Battle, Rating
from .counts import RESAMPLE_CHOICES, BattleTable, CellCounts, PromptPatterns, bootstrap_counts

TIE_CHOICES = ("half", "drop", "davidson")


@dataclass(frozen=True)
class RateOptions:
    """How battles are rated: the options of ``rate``, ``leaderboard`` and ``style.rate_style``.

    Attributes:
        anchor: model fixed at ``anchor_rating``; None fixes the mean rating at ``initial``.
        anchor_rating: the anchor's rating.
        bootstrap: rounds (0 = no intervals). 100 is what the anchor boards use; 1000 for papers.
        resample: ``"prompt"`` resamples whole prompts (honest when the games of one prompt
            are correlated, e.g. both judge orders); ``"battle"`` resamples battles.
        ties: ``"half"``, ``"drop"`` or ``"davidson"`` (see the module docstring).
        seed: seed of the bootstrap; the same seed gives the same numbers.
        scale, base, initial: the Elo scale: ``scale`` points = a factor ``base`` in odds.
        prior_games: virtual games per model used only where the MLE does not exist.
        ci: coverage of the interval (0.95 gives the 2.5% and 97.5% quantiles).
    """

    anchor: str | None = None
    anchor_rating: float = 1000.0
    bootstrap: int = 100
    resample: str = "prompt"
    ties: str = "half"
    seed: int = 0
    scale: float = 400.0
    base: float = 10.0
    initial: float = 1000.0
    prior_games: float = 1.0
    ci: float = 0.95

    @classmethod
    def build(cls, options: RateOptions | None = None, **overrides: Any) -> RateOptions:
        """Return ``options`` (default: the defaults above) with ``overrides`` (option names as keywords) set."""
        return replace(options or cls(), **overrides)

    def check(self, models: Sequence[str]) -> None:
        """Raise ``ArenaError`` naming the first option that is out of range or names no model of ``models``."""
        if self.ties not in TIE_CHOICES:
            raise ArenaError(f"unknown ties option {self.ties!r}: use one of {', '.join(TIE_CHOICES)}")
        if self.resample not in RESAMPLE_CHOICES:
            raise ArenaError(f"unknown resample option {self.resample!r}: use one of {', '.join(RESAMPLE_CHOICES)}")
        if self.bootstrap < 0:
            raise ArenaError(f"bootstrap rounds must be 0 or more, not {self.bootstrap}")
        if not 0.0 < self.ci < 1.0:
            raise ArenaError(f"ci must be between 0 and 1 (0.95 for 95% intervals), not {self.ci}")
        if self.prior_games <= 0:
            raise ArenaError(f"prior_games must be positive, not {self.prior_games}")
        if self.anchor is not None and self.anchor not in models:
            raise ArenaError(
                f"anchor model {self.anchor!r} has no battles; models are: {', '.join(sorted(models))}"
            )

    @property
    def elo_per_unit(self) -> float:
        """Rating points per natural-log unit of strength."""
        return self.scale / math.log(self.base)


def log_expit(x: np.ndarray) -> np.ndarray:
    """Return log(1 / (1 + exp(-x))), float64, accurate for any x (within 1e-15 of scipy's).

    numpy rather than scipy.special on purpose: importing scipy.special costs about 0.2 s,
    a large share of ``arena ratings`` on a million battles; this form is also 3x faster
    than scipy's log_expit.
    """
    return np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x)))


def expit(x: np.ndarray) -> np.ndarray:
    """Return the logistic function 1 / (1 + exp(-x)), float64, without overflow (see ``log_expit``)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


class RatingWarning(UserWarning):
    """The data cannot support exact ratings (no MLE, models absent from bootstrap rounds)."""


def _warn(notes: list[str], msg: str, stacklevel: int = 3) -> None:
    """Add ``msg`` to the fit's ``notes`` (for reports) and warn it as a ``RatingWarning``.

    Called by the fitting function itself: the warning names the line that called that function
    (``stacklevel`` 4 from a helper of the fitting function).
    """
    notes.append(msg)
    warnings.warn(msg, RatingWarning, stacklevel=stacklevel)


@dataclass
class BTResult:
    """Ratings of K models, with the bootstrap behind their intervals.

    Attributes:
        models: the K model names, in table order (not sorted).
        ratings: float64 (K,), maximum-likelihood ratings (Elo scale).
        boot: float64 (B, K) bootstrap ratings, NaN where a model had no battle in a
            round; None without bootstrap.
        median, ci_low, ci_high: float64 (K,) from ``boot``; None without bootstrap.
        rank: int64 (K,), 1 + number of models with a higher rating.
        rank_ci: int64 (K,), 1 + number of models whose ci_low is above this ci_high;
            None without bootstrap.
        wins, losses, ties, battles: int64 (K,), counted from the battles (a tie is a tie
            here whatever the ``ties`` option).
        tie_param: Davidson's nu (point estimate) when ``ties="davidson"``.
        warnings: what was warned during the fit, for reports.
        settings: the options the ratings were computed with.
    """

    models: list[str]
    ratings: np.ndarray
    boot: np.ndarray | None
    median: np.ndarray | None
    ci_low: np.ndarray | None
    ci_high: np.ndarray | None
    rank: np.ndarray
    rank_ci: np.ndarray | None
    wins: np.ndarray
    losses: np.ndarray
    ties: np.ndarray
    battles: np.ndarray
    tie_param: float | None = None
    warnings: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    def rating_of(self, model: str) -> float:
        return float(self.ratings[self.models.index(model)])

    def to_ratings(self) -> list[Rating]:
        """Return one ``Rating`` per model, best first (ties in rating broken by name)."""
        order = sorted(range(len(self.models)), key=lambda k: (-self.ratings[k], self.models[k]))
        out = []
        for k in order:
            out.append(
                Rating(
                    model=self.models[k],
                    rating=float(self.ratings[k]),
                    ci_low=_finite_or_none(self.ci_low, k),
                    ci_high=_finite_or_none(self.ci_high, k),
                    rank=int(self.rank[k]),
                    # No interval, no rank interval: comparisons with NaN would say "first".
                    rank_ci=None if self.rank_ci is None or _finite_or_none(self.ci_high, k) is None
                    else int(self.rank_ci[k]),
                    wins=int(self.wins[k]),
                    losses=int(self.losses[k]),
                    ties=int(self.ties[k]),
                    battles=int(self.battles[k]),
                )
            )
        return out


@dataclass
class BootstrapSummary:
    """What the rounds of a bootstrap say about K models (``summarize_bootstrap``).

    Attributes:
        median, ci_low, ci_high: float64 (K,) quantiles over the rounds; NaN for a model in no round.
        rank_ci: int64 (K,), 1 + number of models whose ci_low is above this ci_high.
        no_interval: the models in no round (no interval; named in a warning).
    """

    median: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    rank_ci: np.ndarray
    no_interval: list[str]


def summarize_bootstrap(
    boot: np.ndarray, models: Sequence[str], ci: float, notes: list[str], *, unconverged: int, fit: str = ""
) -> BootstrapSummary:
    """Return the intervals of ``boot`` (float64 (B, K), NaN where a model had no battle in a round).

    Every bootstrap of ratings (``rate`` and style control's ``rate_style``) ends here, so they
    report alike: the ``unconverged`` rounds are counted in ``notes``, and the models left with
    no interval are warned by name. ``fit`` names the fit in those lines ("style-controlled ").
    Called by the fitting function: its warnings name the line that called that function.
    """
    rounds = boot.shape[0]
    if unconverged:
        notes.append(f"{unconverged} {fit}bootstrap round(s) did not converge")
    alpha = (1.0 - ci) / 2.0
    with warnings.catch_warnings():
        # a model absent from every round has an all-NaN column: warned below, by name
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, median, hi = np.nanquantile(boot, [alpha, 0.5, 1.0 - alpha], axis=0)
    no_interval = [models[int(j)] for j in np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi)))]
    if no_interval:
        msg = (
            f"{', '.join(no_interval)}: no battle in any of the {rounds} bootstrap rounds, so no {fit}interval "
            "(too few battles or prompts for this model; use more rounds or --resample battle)"
        )
        _warn(notes, msg, stacklevel=4)
    rank_ci = (1 + (lo[None, :] > hi[:, None]).sum(axis=1)).astype(np.int64)
    return BootstrapSummary(median, lo, hi, rank_ci, no_interval)


def _finite_or_none(values: np.ndarray | None, k: int) -> float | None:
    """Return ``values[k]`` as a float, or None when there are no values or it is NaN/inf (no interval)."""
    if values is None or not np.isfinite(values[k]):
        return None
    return float(values[k])


# --------------------------------------------------------------------------- public API


def leaderboard(battles: Sequence[Battle], options: RateOptions | None = None, **overrides: Any) -> list[Rating]:
    """Return the Bradley-Terry leaderboard of ``battles``, best first.

    See ``RateOptions`` for the options; this is ``rate(BattleTable.from_battles(battles), ...)``
    turned into ``Rating`` records. Each ``Battle`` counts once whatever its ``games``
    (a battle is already the judge's combined verdict). Deterministic for a given ``seed``.
    """
    return rate(BattleTable.from_battles(battles), options, **overrides).to_ratings()


def rate(
    table: BattleTable,
    options: RateOptions | None = None,
    *,
    max_chunk_elems: int = 4_000_000,
    resampled_counts: Iterable[np.ndarray] | None = None,
    **overrides: Any,
) -> BTResult:
    """Return Bradley-Terry ratings of the battles in ``table`` with bootstrap intervals.

    Args:
        options: the ``RateOptions`` (default: their defaults).
        overrides: options set by name on top of ``options`` (``rate(table, bootstrap=0)``).
        max_chunk_elems: bound on rounds * K * K per batch, which bounds memory.
        resampled_counts: the bootstrap's resamples given by the caller instead of drawn
            here: float (r, C) cell counts per chunk, in the cell order of
            ``CellCounts.from_table(table)``, ``bootstrap`` rows in all (``resample`` and
            ``seed`` are then only recorded). Style control uses it so that its plain and
            controlled ratings see the same resample in every round.
    """
    o = RateOptions.build(options, **overrides)
    models = list(table.models)
    o.check(models)
    k = len(models)
    cells = CellCounts.from_table(table)
    elo_per_unit = o.elo_per_unit
    notes: list[str] = []

    wins, losses, tie_counts, battles = _model_counts(table)

    # ---- point estimate
    w, t = cells.matrices(cells.counts[None, :].astype(np.float64))
    present = (w + w.transpose(0, 2, 1) + t).sum(-1) > 0
    connected = _fit_exists(w, t, o.ties, present)
    use_prior = not bool(connected[0])
    if use_prior:
        msg = _no_mle_message(w[0], t[0], o.ties, models, o.prior_games)
        _warn(notes, msg)
    if o.ties == "davidson" and (w.sum() == 0):
        raise ArenaError("every battle is a tie: there is nothing to rate (use ties='half' to rate them all equal)")
    prior = np.full(1, o.prior_games if use_prior else 0.0)
    theta, nu, ok = _fit(w, t, o.ties, present, prior)
    if not ok.all():
        msg = "the Bradley-Terry fit did not converge; the ratings may be inexact"
        _warn(notes, msg)
    point = theta[0] * elo_per_unit
    point = _gauge(point[None, :], present, models, o.anchor, o.anchor_rating, o.initial, None)[0]

    # ---- bootstrap
    boot = median = lo = hi = rank_ci = None
    if o.bootstrap > 0:
        if resampled_counts is None:
            rng = np.random.default_rng(o.seed)
            # one battle per prompt: resampling prompts is resampling battles (the same draws)
            by_prompt = o.resample == "prompt" and table.n_prompts < table.n_battles
            patterns = PromptPatterns.from_table(table, cells) if by_prompt else None
            chunk = max(1, max_chunk_elems // max(k * k, cells.n_cells))
            resampled_counts = bootstrap_counts(cells, patterns, o.bootstrap, rng, chunk=chunk)
        parts = []
        n_prior_rounds = 0
        n_absent_rounds = 0
        n_anchorless_rounds = 0
        n_unconverged = 0
        for counts in resampled_counts:
            bw, bt_ = cells.matrices(counts)
            bpresent = (bw + bw.transpose(0, 2, 1) + bt_).sum(-1) > 0
            if use_prior:
                bprior = np.full(counts.shape[0], o.prior_games)
            else:
                bconn = _fit_exists(bw, bt_, o.ties, bpresent)
                bprior = np.where(bconn, 0.0, o.prior_games)
                n_prior_rounds += int((~bconn).sum())
            # a round where no battle is a tie cannot fit Davidson's nu: it falls back to nu = 0
            btheta, _, bok = _fit(bw, bt_, o.ties, bpresent, bprior)
            n_unconverged += int((~bok).sum())
            elo = btheta * elo_per_unit
            elo[~bpresent] = np.nan
            n_absent_rounds += int((~bpresent.all(axis=1)).sum())
            if o.anchor is not None:
                n_anchorless_rounds += int((~bpresent[:, models.index(o.anchor)]).sum())
            parts.append(_gauge(elo, bpresent, models, o.anchor, o.anchor_rating, o.initial, point))
        boot = np.concatenate(parts, axis=0)
        if boot.shape[0] != o.bootstrap:
            raise ValueError(f"resampled_counts gave {boot.shape[0]} rounds for bootstrap={o.bootstrap}")
        if n_prior_rounds:
            msg = (
                f"{n_prior_rounds} of {o.bootstrap} bootstrap rounds had a model that never won or never lost "
                f"in the resample; those rounds used the prior of {o.prior_games:g} virtual games per model"
            )
            _warn(notes, msg)
        if n_absent_rounds:
            msg = (
                f"{n_absent_rounds} of {o.bootstrap} bootstrap rounds left out every battle of some model; "
                "its interval uses the other rounds"
            )
            _warn(notes, msg)
        if n_anchorless_rounds:
            msg = (
                f"{n_anchorless_rounds} of {o.bootstrap} bootstrap rounds left out every battle of the anchor "
                f"{o.anchor!r}; they say nothing about ratings relative to it, so no interval uses them"
            )
            _warn(notes, msg)
        summary = summarize_bootstrap(boot, models, o.ci, notes, unconverged=n_unconverged)
        median, lo, hi, rank_ci = summary.median, summary.ci_low, summary.ci_high, summary.rank_ci

    rank = ranks(point)
    return BTResult(
        models=models,
        ratings=point,
        boot=boot,
        median=median,
        ci_low=lo,
        ci_high=hi,
        rank=rank,
        rank_ci=rank_ci,
        wins=wins,
        losses=losses,
        ties=tie_counts,
        battles=battles,
        tie_param=float(nu[0]) if o.ties == "davidson" else None,
        warnings=notes,
        settings={
            **asdict(o),
            "prior_used": use_prior,
        },
    )


def fit_counts(
    wins: np.ndarray,
    ties: np.ndarray | None = None,
    *,
    tie_model: str = "half",
    prior_games: float | np.ndarray = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Return natural-unit strengths float64 (R, K) (mean 0) and Davidson nu (R,).

    The low-level fit for callers that build count matrices themselves (simulations).

    Args:
        wins: float (R, K, K) or (K, K); ``wins[r, i, j]`` = times i beat j.
        ties: float, same shape, symmetric; None for no ties.
        tie_model: ``"half"``, ``"drop"`` or ``"davidson"``.
        prior_games: virtual games per model, scalar or (R,); 0 for the exact MLE.
    """
    w = np.asarray(wins, dtype=np.float64)
    squeeze = w.ndim == 2
    w = w[None] if squeeze else w
    t = np.zeros_like(w) if ties is None else np.asarray(ties, dtype=np.float64).reshape(w.shape)
    present = (w + w.transpose(0, 2, 1) + t).sum(-1) > 0
    prior = np.broadcast_to(np.asarray(prior_games, dtype=np.float64), (w.shape[0],)).copy()
    theta, nu, _ = _fit(w, t, tie_model, present, prior)
    return (theta[0], nu[0]) if squeeze else (theta, nu)


def fits_exist(wins: np.ndarray, ties: np.ndarray | None = None, *, tie_model: str = "half") -> np.ndarray:
    """Return bool (R,): whether the maximum-likelihood ratings exist in each round.

    They exist exactly when the graph "i won at least once against j" (a tie counts both
    ways) is strongly connected over the models that played.
    """
    w = np.asarray(wins, dtype=np.float64)
    w = w[None] if w.ndim == 2 else w
    t = np.zeros_like(w) if ties is None else np.asarray(ties, dtype=np.float64).reshape(w.shape)
    present = (w + w.transpose(0, 2, 1) + t).sum(-1) > 0
    return _fit_exists(w, t, tie_model, present)


def ranks(ratings: np.ndarray, *, tolerance: float = 1e-9) -> np.ndarray:
    """Return int64 (K,): 1 + number of models rated higher (by more than ``tolerance`` Elo).

    The tolerance keeps models with equal points (equal up to rounding) on one rank.
    """
    return (1 + (ratings[None, :] > ratings[:, None] + tolerance).sum(axis=1)).astype(np.int64)


# --------------------------------------------------------------------------- internals


def _model_counts(table: BattleTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return wins, losses, ties, battles: int64 (K,) per model."""
    k = table.n_models
    a, b, o = table.model_a, table.model_b, table.outcome
    winner = np.where(o == 0, a, b)[o != 2]
    loser = np.where(o == 0, b, a)[o != 2]
    wins = np.bincount(winner, minlength=k)
    losses = np.bincount(loser, minlength=k)
    ties = np.bincount(a[o == 2], minlength=k) + np.bincount(b[o == 2], minlength=k)
    battles = np.bincount(a, minlength=k) + np.bincount(b, minlength=k)
    return wins.astype(np.int64), losses.astype(np.int64), ties.astype(np.int64), battles.astype(np.int64)


def _edges(wins: np.ndarray, ties: np.ndarray, tie_model: str) -> np.ndarray:
    """Return bool (R, K, K): i -> j when i has (part of) a win against j."""
    if tie_model == "drop":
        return wins > 0
    # a tie is half a win each way, and under Davidson a tie also forbids infinite gaps
    return (wins > 0) | (ties > 0)


def _fit_exists(wins: np.ndarray, ties: np.ndarray, tie_model: str, present: np.ndarray) -> np.ndarray:
    """Return bool (R,): the win graph is strongly connected over the present models.

    Forward and backward reachability from one present model, by repeated batched
    mat-vec products, stopping as soon as nothing new is reached (a few steps in
    practice), so the cost is R * K^2 per step.
    """
    adj = _edges(wins, ties, tie_model).astype(np.float64)
    r, k = present.shape
    start = np.argmax(present, axis=1)
    ok = np.ones(r, dtype=bool)
    for a in (adj, adj.transpose(0, 2, 1)):
        reach = np.zeros((r, k), dtype=bool)
        reach[np.arange(r), start] = True
        for _ in range(k):
            new = reach | (np.einsum("rk,rkj->rj", reach.astype(np.float64), a) > 0)
            if (new == reach).all():
                break
            reach = new
        ok &= ((reach | ~present) == True).all(axis=1)  # noqa: E712 - elementwise
    return ok


def _no_mle_message(w: np.ndarray, t: np.ndarray, tie_model: str, models: list[str], prior_games: float) -> str:
    """Say why the maximum-likelihood ratings do not exist, naming the models."""
    from scipy.sparse.csgraph import connected_components

    adj = _edges(w[None], t[None], tie_model)[0]
    scored_wins = w + (0.5 * t if tie_model == "half" else 0.0)
    played = (w + w.T + t).sum(1) > 0
    never_lost = [models[i] for i in range(len(models)) if played[i] and scored_wins[:, i].sum() == 0]
    never_won = [models[i] for i in range(len(models)) if played[i] and scored_wins[i, :].sum() == 0]
    n_pieces, _ = connected_components(adj | adj.T, directed=False)
    reasons = []
    if never_lost:
        reasons.append("never lost: " + ", ".join(never_lost))
    if never_won:
        reasons.append("never won: " + ", ".join(never_won))
    if n_pieces > 1:
        reasons.append(f"the battle graph is in {n_pieces} pieces that never met, so their ratings are not comparable")
    if not reasons:
        reasons.append("some group of models never lost to the others")
    return (
        "exact Bradley-Terry ratings do not exist (" + "; ".join(reasons) + "); "
        f"ratings use a prior of {prior_games:g} virtual games per model against the average, "
        "so they are finite but shrunk: add battles for these models"
    )


def _gauge(
    elo: np.ndarray,
    present: np.ndarray,
    models: list[str],
    anchor: str | None,
    anchor_rating: float,
    initial: float,
    reference: np.ndarray | None,
) -> np.ndarray:
    """Shift each row of ``elo`` float64 (R, K) to the leaderboard's gauge.

    With an anchor, every row is "rating relative to the anchor, plus ``anchor_rating``":
    the anchor gets ``anchor_rating``. A bootstrap round (``reference`` given) that left
    out every battle of the anchor says nothing about ratings relative to it, so the whole
    row becomes NaN (no model's interval uses it) rather than being centred some other
    way, which would mix two gauges in one interval. Without an anchor a point estimate
    (``reference`` None) gets mean ``initial``; a bootstrap round gets the same mean as
    ``reference`` over the models it has, so a missing model does not move the others.
    """
    out = elo.copy()
    if anchor is not None:
        a = models.index(anchor)
        has = present[:, a]
        out[has] += anchor_rating - out[has, a][:, None]
        if reference is not None:
            out[~has] = np.nan
            return out
        rest = ~has
    else:
        rest = np.ones(elo.shape[0], dtype=bool)
    if rest.any():
        p = present[rest]
        vals = np.where(p, out[rest], 0.0)
        cur = vals.sum(1) / p.sum(1)
        if reference is None:
            target = np.full(cur.shape, initial)
        else:
            target = np.where(p, reference[None, :], 0.0).sum(1) / p.sum(1)
        out[rest] += (target - cur)[:, None]
    return out


def damped_step(loglik: Callable[[np.ndarray], np.ndarray], par: np.ndarray, step: np.ndarray, ll: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (step lengths t (R,), stuck bool (R,), log-likelihood at ``par + t * step`` (R,)).

    The line search of a batch of R Newton fits: each round's ``step`` (R, P) from ``par``
    (R, P), whose log-likelihood is ``ll`` (R,), is halved (at most 40 times) until
    ``loglik`` (float (R, P) -> (R,)) no longer goes down. A round where no length helps is
    stuck: it stays put (t = 0, log-likelihood ``ll``).
    """
    t = np.ones(par.shape[0])
    stuck = np.zeros(par.shape[0], dtype=bool)
    for _ in range(40):
        ll_new = loglik(par + t[:, None] * step)
        bad = ll_new < ll - 1e-12 * np.abs(ll)
        if not bad.any():
            break
        t = np.where(bad, t * 0.5, t)
    else:
        stuck = bad
        t = np.where(stuck, 0.0, t)
        ll_new = np.where(stuck, ll, ll_new)
    return t, stuck, ll_new


def _newton_direction(neg_hessian: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Return float64 (R, P): the Newton step solving ``neg_hessian @ step = grad`` per round."""
    return np.linalg.solve(neg_hessian, grad[:, :, None])[:, :, 0]


def _fit(
    wins: np.ndarray,
    ties: np.ndarray,
    tie_model: str,
    present: np.ndarray,
    prior: np.ndarray,
    *,
    max_iter: int = 100,
    tol: float = 1e-11,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit R independent problems by damped Newton; return theta (R, K), nu (R,), converged (R,).

    A round converges when its full Newton step is below ``tol`` (not the step after the
    line search: a step halved to nothing is no progress, not convergence). A round whose
    line search finds no step length that keeps the likelihood from falling (40 halvings)
    stays where it is and counts as converged only if its gradient is already ~0;
    otherwise it is reported as not converged.

    Args:
        wins: float64 (R, K, K) decisive wins, ``ties`` float64 (R, K, K) symmetric.
        present: bool (R, K), models with at least one battle in the round; absent
            models keep theta 0 (the caller masks them).
        prior: float64 (R,), virtual games per model (0 = exact MLE).

    The strengths are in natural units (log-odds). Without a prior the Hessian is
    singular along "add a constant to every present model"; adding c * u u^T (u = the
    present models) makes it invertible, and because the gradient is orthogonal to u the
    step then keeps the sum of strengths at 0.
    """
    r, k, _ = wins.shape
    davidson = tie_model == "davidson"
    if tie_model == "half":
        w = wins + 0.5 * ties
    else:
        w = wins
    n = w + w.transpose(0, 2, 1) + (ties if davidson else 0.0)
    tie_total = 0.5 * ties.sum(axis=(1, 2)) if davidson else np.zeros(r)
    fit_nu = davidson & (tie_total > 0)
    n_par = k + 1
    theta = np.zeros((r, n_par))
    if davidson:
        decisive = wins.sum(axis=(1, 2))  # wins[r, i, j] counts each decisive game once
        frac = np.where(fit_nu, tie_total / np.maximum(tie_total + decisive, 1e-300), 0.5)
        theta[:, k] = np.log(np.clip(2 * frac / (1 - frac + 1e-12), 1e-6, 1e6))
    u = present.astype(np.float64)
    free = np.concatenate([present, fit_nu[:, None]], axis=1)
    gauge = (prior == 0)[:, None, None] * (u[:, :, None] * u[:, None, :])

    def objective(par: np.ndarray, need_hessian: bool):
        th = par[:, :k]
        d = th[:, :, None] - th[:, None, :]
        if davidson:
            nu = np.where(fit_nu, np.exp(par[:, k]), 0.0)
            half = 0.5 * d
            ch, sh = np.cosh(half), np.sinh(half)
            z = 2.0 * ch + nu[:, None, None]
            # L = 1/2 sum_{i != j} [(w_ij - w_ji) d/2 + t phi - n log z]; the i == j terms are 0
            phi_term = np.where(fit_nu, par[:, k], 0.0)
            ll = 0.5 * ((w - w.transpose(0, 2, 1)) * half).sum((1, 2))
            ll += 0.5 * (ties * phi_term[:, None, None]).sum((1, 2))
            ll -= 0.5 * (n * np.log(z)).sum((1, 2))
            grad = np.zeros_like(par)
            grad[:, :k] = (0.5 * (w - w.transpose(0, 2, 1)) - n * sh / z).sum(2)
            grad[:, k] = np.where(fit_nu, 0.5 * (ties - n * nu[:, None, None] / z).sum((1, 2)), 0.0)
            hess = None
            if need_hessian:
                v = n * (ch / (2.0 * z) - sh * sh / (z * z))
                hess = np.zeros((r, n_par, n_par))
                hess[:, :k, :k] = v - np.einsum("rij->ri", v)[:, :, None] * np.eye(k)
                cross = (n * sh * nu[:, None, None] / (z * z)).sum(2)
                hess[:, :k, k] = cross
                hess[:, k, :k] = cross
                hess[:, k, k] = -0.5 * (n * nu[:, None, None] * 2.0 * ch / (z * z)).sum((1, 2))
        else:
            ll = (w * log_expit(d)).sum((1, 2))
            p = expit(d)
            grad = np.zeros_like(par)
            grad[:, :k] = (w - n * p).sum(2)
            hess = None
            if need_hessian:
                v = n * p * (1.0 - p)
                hess = np.zeros((r, n_par, n_par))
                hess[:, :k, :k] = v - v.sum(2)[:, :, None] * np.eye(k)
        # prior: prior_games virtual games, half won, against a reference at theta = 0
        s = expit(th)
        ll = ll + prior * 0.5 * (log_expit(th) + log_expit(-th)).sum(1)
        grad[:, :k] += prior[:, None] * (0.5 - s)
        if hess is not None:  # need_hessian
            hess[:, np.arange(k), np.arange(k)] -= prior[:, None] * s * (1 - s)
        return ll, grad, hess

    converged = np.zeros(r, dtype=bool)
    failed = np.zeros(r, dtype=bool)
    ll, grad, hess = objective(theta, True)
    eye = np.eye(n_par)
    for _ in range(max_iter):
        neg = -hess
        scale_c = np.maximum(np.abs(np.diagonal(neg, axis1=1, axis2=2)).max(1), 1e-12)
        neg[:, :k, :k] += scale_c[:, None, None] * gauge
        # frozen parameters (absent models, nu without ties) get an identity row: step 0
        neg = np.where(free[:, :, None] & free[:, None, :], neg, 0.0) + (~free)[:, :, None] * eye
        g = np.where(free, grad, 0.0)
        step = _newton_direction(neg, g)
        step[converged] = 0.0
        # damped: halve the step where the log-likelihood would go down; a stuck round is
        # converged only where the gradient is already ~0 (rounding), otherwise it failed
        t, stuck, _ = damped_step(lambda par: objective(par, False)[0], theta, step, ll)
        theta = theta + t[:, None] * step
        flat = np.abs(g).max(1) <= 1e-8 * np.maximum(1.0, np.abs(ll))
        # judged on the full Newton step: a step the line search shrank to nothing is no progress
        converged |= np.where(stuck, flat, np.abs(step).max(1) <= tol)
        failed |= stuck & ~flat
        ll, grad, hess = objective(theta, True)
        if (converged | failed).all():
            break
    th = theta[:, :k]
    # centre the present models at 0 (the gauge without a prior already does; a prior does not)
    th = th - (np.where(present, th, 0.0).sum(1) / np.maximum(present.sum(1), 1))[:, None]
    th = np.where(present, th, 0.0)
    nu = np.where(fit_nu, np.exp(theta[:, k]), 0.0)
    return th, nu, converged
