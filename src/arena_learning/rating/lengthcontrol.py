"""Length-controlled win rate against a reference model (AlpacaEval 2's LC win rate).

A judge that prefers longer answers gives a verbose model a raw win rate that its quality
does not earn. AlpacaEval 2 (Dubois et al. 2024, ``alpaca_eval/metrics/glm_winrate.py``)
fits, per model, a logistic GLM of the model's preference over the reference on

    logit p = theta + phi * tanh(delta_len / sd(delta_len)) + psi * difficulty(instruction)

and reports the prediction with the length term set to 0, averaged over instructions, x 100:
"what would the judge prefer if both answers had the same length".

Differences from AlpacaEval, and why: AlpacaEval reads instruction difficulty from a table
precomputed on its public leaderboard; here it is estimated from the other models' battles
against the same reference in this workspace (a joint GLM with a term per instruction, each
model's difficulty fitted leaving that model out: fitted with its own outcomes, the term would
soak them up and its weight would grow with the noise). With no other model the term is 0.
AlpacaEval also regularises towards prompted "gamed" baselines it ships; we have none, and use
a mild L2 penalty instead. Its L1 with cross-validated strength
becomes a fixed L2 here (scikit-learn ``LogisticRegression``), and its standard error a
bootstrap over prompts (the GLM refitted in every round).

The length slope is pooled across the models by default (``length_slope="pooled"``): it is the
judge's taste for length, shared by every model it judges, so one slope ``phi`` is fitted jointly
over all models' battles against the reference (each model keeping its own ``theta`` and ``psi``),
the length difference normalised by one pooled SD. A model longer (or shorter) than the reference
on nearly every prompt has a nearly constant ``tanh`` term: its own fit cannot tell the length
slope from its quality (a padded copy of the reference then reads far below 50%), while the pooled
slope is identified by the other models. Such a model is named in a warning (SD of its normalised
difference below 0.3, or one side longer on more than 95% of prompts). ``length_slope="per-model"``
is AlpacaEval's per-model form (its own slope and SD per model), for figures set beside theirs.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ArenaError
from ..records import Battle

C_MODEL = 10.0
"""Inverse L2 strength of the per-model GLM (3 coefficients): mild, so separable data stays finite."""
C_DIFFICULTY = 1.0
"""Inverse L2 strength of the joint difficulty GLM: each instruction's term is shrunk towards 0."""
LENGTH_SLOPES = ("pooled", "per-model")
"""How the length slope is fitted: one for every model (the judge's), or one per model (AlpacaEval's)."""
MIN_TANH_SD = 0.3
"""Below this SD of a model's tanh(normalised length difference), its own length slope is not identified."""
MAX_LONGER_SHARE = 0.95
"""Above this share of prompts with one side longer, a model's own length slope is not identified."""


@dataclass
class LCWinRate:
    """One model against the reference: raw and length-controlled win rates (percent) with 95% CIs."""

    model: str
    reference: str
    battles: int
    prompts: int
    win_rate: float
    win_low: float | None
    win_high: float | None
    lc_win_rate: float
    lc_low: float | None
    lc_high: float | None
    length_coef: float  # phi: log-odds per unit of tanh(normalised length difference); + = judge likes longer
    difficulty_coef: float  # psi
    avg_length: float  # characters of the model's answers in these battles
    reference_avg_length: float
    length_slope: str = "per-model"  # how phi was fitted: pooled over the models, or this model's own
    length_identified: bool = True  # whether this model's own battles could tell its length slope apart
    unknown_length: int = 0  # its battles against the reference left out: an answer's length is unknown

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Rows:
    """One model's battles against the reference. y float (N,) in [0, 1]: the model's points
    (tie 1/2); delta float (N,): its answer's length minus the reference's; prompt int (N,):
    index into the shared prompt list; len_model, len_ref float (N,)."""

    y: np.ndarray
    delta: np.ndarray
    prompt: np.ndarray
    len_model: np.ndarray
    len_ref: np.ndarray


def _fit(x: np.ndarray, y: np.ndarray, c: float, solver: str = "newton-cholesky",
         tol: float = 1e-8, mult: np.ndarray | None = None):
    """Return a logistic GLM (no intercept) fitted to soft labels ``y`` in [0, 1], as AlpacaEval does:
    every row twice, once labelled 1 with weight y and once labelled 0 with weight 1 - y. Newton's
    method suits the few dense features of one model; the sparse joint fit uses L-BFGS. ``mult``
    float (N,): how many times each row counts (a bootstrap draw)."""
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    n = x.shape[0]
    stack = sp.vstack([x, x], format="csr") if sp.issparse(x) else np.vstack([x, x])
    labels = np.r_[np.ones(n), np.zeros(n)]
    weights = np.r_[y, 1.0 - y] if mult is None else np.r_[y * mult, (1.0 - y) * mult]
    model = LogisticRegression(C=c, fit_intercept=False, solver=solver, max_iter=1000, tol=tol)
    return model.fit(stack, labels, sample_weight=weights)


def _features(rows: _Rows, sd: float, difficulty: np.ndarray) -> np.ndarray:
    """Return the design matrix float (N, 3): [1, tanh(delta / sd), difficulty of the row's prompt]."""
    tanh = np.tanh(rows.delta / sd) if sd > 0 else np.zeros_like(rows.delta)
    return np.column_stack([np.ones_like(rows.delta), tanh, difficulty[rows.prompt]])


def _lc(coef: np.ndarray, difficulty: np.ndarray) -> float:
    """Return the LC win rate (percent): the GLM's prediction with no length difference, averaged over prompts."""
    from scipy.special import expit

    return float(100.0 * expit(coef[0] + coef[2] * difficulty).mean())


def leave_one_out_difficulty(rows: Sequence[_Rows], n_prompts: int) -> list[np.ndarray]:
    """Return, per entry of ``rows``, float (n_prompts,): each prompt's term in a joint GLM of the *other*
    entries (several models against the reference): a term per model, a length slope per model, a term
    per prompt (0 where unseen); all zeros for a model alone.

    One design matrix serves every fit: the left-out model's rows are dropped, its columns then
    have no data and L2 keeps them at 0.
    """
    import scipy.sparse as sp

    k = len(rows)
    if k < 2:
        return [np.zeros(n_prompts) for _ in rows]
    blocks, ys, owner = [], [], []
    for i, r in enumerate(rows):
        n = len(r.y)
        sd = float(np.std(r.delta))
        tanh = np.tanh(r.delta / sd) if sd > 0 else np.zeros(n)
        at = np.arange(n)
        ident = sp.csr_matrix((np.ones(n), (at, np.full(n, i))), shape=(n, k))
        slope = sp.csr_matrix((tanh, (at, np.full(n, i))), shape=(n, k))
        prompt = sp.csr_matrix((np.ones(n), (at, r.prompt)), shape=(n, n_prompts))
        blocks.append(sp.hstack([ident, slope, prompt], format="csr"))
        ys.append(r.y)
        owner.append(np.full(n, i))
    x, y, who = sp.vstack(blocks, format="csr"), np.concatenate(ys), np.concatenate(owner)
    out = []
    for i in range(k):
        keep = who != i
        # a feature of the per-model fits, not a reported figure: a tolerance of 1e-5 is ample
        coef = _fit(x[keep], y[keep], C_DIFFICULTY, solver="lbfgs", tol=1e-5).coef_[0]
        out.append(np.asarray(coef[2 * k:], dtype=np.float64))
    return out


def lc_win_rates(
    battles: Sequence[Battle],
    lengths: Mapping[tuple[str, str], float],
    reference: str,
    *,
    bootstrap: int = 200,
    seed: int = 0,
    ci: float = 0.95,
    length_slope: str = "pooled",
) -> list[LCWinRate]:
    """Return every model's raw and length-controlled win rate against ``reference``, best LC first.

    ``length_slope``: ``pooled`` (one slope for all models, the default) or ``per-model``
    (AlpacaEval's); see the module docstring. A model whose own length slope is not identified
    is named in a warning (``UserWarning``).

    ``battles``: any battles; those between a model and ``reference`` count. ``lengths``:
    (prompt id, model) -> answer length (AlpacaEval uses characters); a battle whose answer
    length is unknown is left out, counted (``LCWinRate.unknown_length``) and warned with the count
    (``warn_unknown_lengths``). ``bootstrap`` rounds resample prompts (0: no intervals).
    """
    models: list[str] = []
    prompt_ids: dict[str, int] = {}
    raw: dict[str, list[tuple[float, float, int, float, float]]] = {}
    unknown: Counter[str] = Counter()
    seen_reference = False
    for b in battles:
        if reference not in (b.model_a, b.model_b) or b.model_a == b.model_b:
            continue
        seen_reference = True
        model = b.model_b if b.model_a == reference else b.model_a
        la, lr = lengths.get((b.prompt_id, model)), lengths.get((b.prompt_id, reference))
        if la is None or lr is None:
            unknown[model] += 1
            continue
        won = {"tie": 0.5, "model_a": 1.0, "model_b": 0.0}[b.outcome]
        y = won if b.model_a == model else 1.0 - won
        p = prompt_ids.setdefault(b.prompt_id, len(prompt_ids))
        if model not in raw:
            models.append(model)
            raw[model] = []
        # A battle of weight w (arena-hard's strong verdict) counts as w rows, as in the Bradley-Terry fit.
        raw[model].extend([(y, float(la) - float(lr), p, float(la), float(lr))] * b.weight)
    if not seen_reference:
        raise ArenaError(f"no battles against the reference {reference!r}: give a model that played the others "
                         "(e.g. the AlpacaEval baseline whose outputs were imported)")
    if not raw:
        raise ArenaError(f"the battles against {reference!r} have no answer lengths: import or generate the answers")
    warn_unknown_lengths(unknown, reference)
    if length_slope not in LENGTH_SLOPES:
        raise ArenaError(f"unknown length slope {length_slope!r}: use one of {', '.join(LENGTH_SLOPES)}")
    rows = {}
    for m in models:
        a = np.array(raw[m], dtype=np.float64)
        rows[m] = _Rows(y=a[:, 0], delta=a[:, 1], prompt=a[:, 2].astype(np.int64), len_model=a[:, 3], len_ref=a[:, 4])
    n_prompts = len(prompt_ids)
    rng = np.random.default_rng(seed)
    alpha = (1.0 - ci) / 2.0
    difficulties = leave_one_out_difficulty([rows[m] for m in models], n_prompts)
    pooled = length_slope == "pooled" and len(models) > 1
    if pooled:
        pooled_sd = float(np.std(np.concatenate([rows[m].delta for m in models])))
        fit = _Pooled([rows[m] for m in models], pooled_sd, difficulties, n_prompts)
        coefs = fit.coefs(None)
        if bootstrap > 0:
            boot_wins, boot_lcs = fit.bootstrap(bootstrap, rng)
    out = []
    unidentified = []
    for i, (m, difficulty) in enumerate(zip(models, difficulties)):
        r = rows[m]
        sd = pooled_sd if pooled else float(np.std(r.delta))
        identified = _identified(r, sd)
        if not identified:
            unidentified.append(m)
        if pooled:
            coef = coefs[i]
        else:
            coef = _fit(_features(r, sd, difficulty), r.y, C_MODEL).coef_[0]
        lc = _lc(coef, difficulty[np.unique(r.prompt)])
        win_lo = win_hi = lc_lo = lc_hi = None
        if bootstrap > 0:
            wins, lcs = (boot_wins[:, i], boot_lcs[:, i]) if pooled else _bootstrap(r, sd, difficulty, bootstrap, rng)
            win_lo, win_hi = (float(x) for x in np.quantile(wins, [alpha, 1 - alpha]))
            lc_lo, lc_hi = (float(x) for x in np.quantile(lcs, [alpha, 1 - alpha]))
        out.append(LCWinRate(
            model=m, reference=reference, battles=len(r.y), prompts=int(np.unique(r.prompt).size),
            win_rate=float(100.0 * r.y.mean()), win_low=win_lo, win_high=win_hi,
            lc_win_rate=lc, lc_low=lc_lo, lc_high=lc_hi, length_coef=float(coef[1]), difficulty_coef=float(coef[2]),
            avg_length=float(r.len_model.mean()), reference_avg_length=float(r.len_ref.mean()),
            length_slope="pooled" if pooled else "per-model", length_identified=identified,
            unknown_length=unknown[m]))
    if unidentified:
        names = ", ".join(unidentified)
        if pooled:
            how = "the slope pooled over the other models is used"
        elif len(models) > 1:
            how = "its LC win rate is unreliable; the pooled slope (the default) fixes this"
        else:
            how = ("its LC win rate is unreliable: judge other models against the same reference, so that a "
                   "pooled length slope can be fitted")
        warnings.warn(f"the length term of {names} is not identified: longer (or shorter) than {reference} on "
                      f"nearly every prompt, so its own battles cannot tell the judge's length bias from its "
                      f"quality; {how}", UserWarning, stacklevel=2)
    out.sort(key=lambda x: -x.lc_win_rate)
    return out


def warn_unknown_lengths(unknown: Mapping[str, int], reference: str) -> None:
    """Warn how many battles against ``reference`` were left out for an unknown answer length, per model."""
    if not any(unknown.values()):
        return
    per_model = ", ".join(f"{m} {n}" for m, n in sorted(unknown.items()) if n)
    warnings.warn(f"{sum(unknown.values())} battles against {reference} left out: an answer's length is unknown "
                  f"(its answer is not in the workspace); by model: {per_model}", UserWarning, stacklevel=3)


def _identified(r: _Rows, sd: float) -> bool:
    """Return whether a model's own battles identify its length slope (see MIN_TANH_SD, MAX_LONGER_SHARE)."""
    tanh = np.tanh(r.delta / sd) if sd > 0 else np.zeros_like(r.delta)
    longer = max(float(np.mean(r.delta > 0)), float(np.mean(r.delta < 0)))
    return float(np.std(tanh)) >= MIN_TANH_SD and longer <= MAX_LONGER_SHARE


class _Pooled:
    """The joint GLM of every model against the reference with one length slope:
    logit p = theta_m + phi * tanh(delta / sd) + psi_m * difficulty_m(prompt)."""

    def __init__(self, rows: Sequence[_Rows], sd: float, difficulties: Sequence[np.ndarray], n_prompts: int):
        import scipy.sparse as sp

        k = len(rows)
        blocks, ys, owner, prompt = [], [], [], []
        for i, (r, d) in enumerate(zip(rows, difficulties)):
            n = len(r.y)
            at, col = np.arange(n), np.full(n, i)
            tanh = np.tanh(r.delta / sd) if sd > 0 else np.zeros(n)
            ident = sp.csr_matrix((np.ones(n), (at, col)), shape=(n, k))
            slope = sp.csr_matrix(tanh[:, None])
            diff = sp.csr_matrix((d[r.prompt], (at, col)), shape=(n, k))
            blocks.append(sp.hstack([ident, slope, diff], format="csr"))
            ys.append(r.y)
            owner.append(np.full(n, i))
            prompt.append(r.prompt)
        self.x = sp.vstack(blocks, format="csr")
        self.y, self.owner, self.prompt = np.concatenate(ys), np.concatenate(owner), np.concatenate(prompt)
        self.k, self.n_prompts, self.rows, self.difficulties = k, n_prompts, rows, difficulties

    def coefs(self, counts: np.ndarray | None) -> list[np.ndarray]:
        """Return per model float (3,): (theta_m, phi, psi_m); ``counts`` float (n_prompts,): a bootstrap draw."""
        mult = None if counts is None else counts[self.prompt]
        c = _fit(self.x, self.y, C_MODEL, solver="lbfgs", tol=1e-6, mult=mult).coef_[0]
        k = self.k
        return [np.array([c[i], c[k], c[k + 1 + i]]) for i in range(k)]

    def bootstrap(self, rounds: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Return float (rounds, K) raw and LC win rates (percent) over prompt resamples, the joint GLM refitted."""
        from scipy.special import expit

        wins, lcs = np.empty((rounds, self.k)), np.empty((rounds, self.k))
        for b in range(rounds):
            counts = np.bincount(rng.integers(0, self.n_prompts, self.n_prompts), minlength=self.n_prompts)
            counts = counts.astype(np.float64)
            coefs = self.coefs(counts)
            for i, (r, d) in enumerate(zip(self.rows, self.difficulties)):
                w = counts[r.prompt]
                wins[b, i] = 100.0 * float((r.y * w).sum() / w.sum()) if w.sum() else np.nan
                mine = np.unique(r.prompt)
                pw = counts[mine]
                lc = expit(coefs[i][0] + coefs[i][2] * d[mine])
                lcs[b, i] = 100.0 * float((lc * pw).sum() / pw.sum()) if pw.sum() else np.nan
        return wins, lcs


def _bootstrap(r: _Rows, sd: float, difficulty: np.ndarray, rounds: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Return float (rounds,) raw and LC win rates (percent) over prompt resamples of ``r``.

    The GLM is refitted in each round.
    """
    from scipy.special import expit

    prompts, inverse = np.unique(r.prompt, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(prompts.size))
    sizes = np.bincount(inverse, minlength=prompts.size)
    x_all = _features(r, sd, difficulty)
    wins, lcs = np.empty(rounds), np.empty(rounds)
    for k in range(rounds):
        pick = rng.integers(0, prompts.size, prompts.size)
        # the rows of every picked prompt (a prompt with several battles brings them all)
        idx = order[np.repeat(starts[pick], sizes[pick]) + _ranges(sizes[pick])]
        y = r.y[idx]
        wins[k] = 100.0 * y.mean()
        coef = _fit(x_all[idx], y, C_MODEL).coef_[0]
        lcs[k] = float(100.0 * expit(coef[0] + coef[2] * difficulty[prompts[pick]]).mean())
    return wins, lcs


def _ranges(sizes: np.ndarray) -> np.ndarray:
    """Return int (sizes.sum(),): 0..s-1 for each s in ``sizes``, concatenated."""
    ends = np.cumsum(sizes)
    return np.arange(ends[-1] if sizes.size else 0) - np.repeat(ends - sizes, sizes)
