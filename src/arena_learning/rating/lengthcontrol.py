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
"""

from __future__ import annotations

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
         tol: float = 1e-8):
    """Return a logistic GLM (no intercept) fitted to soft labels ``y`` in [0, 1], as AlpacaEval does:
    every row twice, once labelled 1 with weight y and once labelled 0 with weight 1 - y. Newton's
    method suits the few dense features of one model; the sparse joint fit uses L-BFGS."""
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    n = x.shape[0]
    stack = sp.vstack([x, x], format="csr") if sp.issparse(x) else np.vstack([x, x])
    labels = np.r_[np.ones(n), np.zeros(n)]
    weights = np.r_[y, 1.0 - y]
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
) -> list[LCWinRate]:
    """Return every model's raw and length-controlled win rate against ``reference``, best LC first.

    ``battles``: any battles; those between a model and ``reference`` count. ``lengths``:
    (prompt id, model) -> answer length (AlpacaEval uses characters); a battle whose answer
    length is unknown is left out. ``bootstrap`` rounds resample prompts (0: no intervals).
    """
    models: list[str] = []
    prompt_ids: dict[str, int] = {}
    raw: dict[str, list[tuple[float, float, int, float, float]]] = {}
    seen_reference = False
    for b in battles:
        if reference not in (b.model_a, b.model_b) or b.model_a == b.model_b:
            continue
        seen_reference = True
        model = b.model_b if b.model_a == reference else b.model_a
        la, lr = lengths.get((b.prompt_id, model)), lengths.get((b.prompt_id, reference))
        if la is None or lr is None:
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
    rows = {}
    for m in models:
        a = np.array(raw[m], dtype=np.float64)
        rows[m] = _Rows(y=a[:, 0], delta=a[:, 1], prompt=a[:, 2].astype(np.int64), len_model=a[:, 3], len_ref=a[:, 4])
    n_prompts = len(prompt_ids)
    rng = np.random.default_rng(seed)
    alpha = (1.0 - ci) / 2.0
    difficulties = leave_one_out_difficulty([rows[m] for m in models], n_prompts)
    out = []
    for m, difficulty in zip(models, difficulties):
        r = rows[m]
        sd = float(np.std(r.delta))
        coef = _fit(_features(r, sd, difficulty), r.y, C_MODEL).coef_[0]
        lc = _lc(coef, difficulty[np.unique(r.prompt)])
        win_lo = win_hi = lc_lo = lc_hi = None
        if bootstrap > 0:
            wins, lcs = _bootstrap(r, sd, difficulty, bootstrap, rng)
            win_lo, win_hi = (float(x) for x in np.quantile(wins, [alpha, 1 - alpha]))
            lc_lo, lc_hi = (float(x) for x in np.quantile(lcs, [alpha, 1 - alpha]))
        out.append(LCWinRate(
            model=m, reference=reference, battles=len(r.y), prompts=int(np.unique(r.prompt).size),
            win_rate=float(100.0 * r.y.mean()), win_low=win_lo, win_high=win_hi,
            lc_win_rate=lc, lc_low=lc_lo, lc_high=lc_hi, length_coef=float(coef[1]), difficulty_coef=float(coef[2]),
            avg_length=float(r.len_model.mean()), reference_avg_length=float(r.len_ref.mean())))
    out.sort(key=lambda x: -x.lc_win_rate)
    return out


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
