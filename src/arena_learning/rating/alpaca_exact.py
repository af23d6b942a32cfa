"""AlpacaEval 2's length-controlled win rate computed their way, for a figure set beside their leaderboard
(``arena lc-winrate --alpaca-eval-exact``).

``alpaca_eval/metrics/glm_winrate.py`` (``length_controlled_v1``) fits, per model against the baseline,
a logistic GLM without intercept on the formula

    np.tanh(std_delta_len) + instruction_difficulty + not_gamed_baseline.astype(float) - 1

where ``std_delta_len`` is (baseline's length - model's length) / its SD over the model's rows (pandas'
SD: ``ddof=1``), lengths in characters, ``instruction_difficulty`` a fixed number per instruction, read
from their ``df_gamed.csv`` (the first row of each ``index``), and ``not_gamed_baseline`` 1 for the
model's rows. When the gamed rows are given (their ``df_gamed.csv``: annotations of a verbose and a
concise copy of the baseline, ``not_gamed_baseline`` False), they join the fit at weight
``lambda / 2`` with lambda 0.2, which pulls the length and difficulty slopes towards the baseline's.
Probability targets are fitted by writing every row twice (label 1 weighted by the preference, label 0
by its complement) and ``LogisticRegressionCV`` picks the L1 strength (liblinear, no intercept,
``random_state=123``) by a 5-fold ``GroupKFold`` over the original rows, scored by their continuous
log loss. The LC win rate is the model's prediction with ``std_delta_len`` 0, averaged over its rows.
Everything above is theirs, followed to the order of the rows (which decides the folds); the code is
ours (their package downloads its tables from a model hub at import time, which cannot run offline).

``index`` is the position of the prompt in the workspace's test set, which is AlpacaEval's index when
the test set is their 805 instructions in their order (``arena ingest`` of their ``alpaca_eval.json``
keeps it). Without their tables the instruction difficulty is this workspace's own (each prompt's term
in a joint GLM of the other models against the same baseline, as in ``lengthcontrol``), and the fit has
no gamed rows: their formula and fit, not their numbers.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ArenaError
from ..records import Battle
from .lengthcontrol import LCWinRate, _identified, _Rows, leave_one_out_difficulty, warn_unknown_lengths

GAMED_COLUMNS = ("index", "preference", "std_delta_len", "instruction_difficulty", "not_gamed_baseline")
"""The columns of AlpacaEval's ``df_gamed.csv`` that the fit reads (a ``model`` column is dropped, as they do)."""
REGULARIZE_TO_BASELINE_LAMBDA = 0.2
"""``GLM_INFO['length_controlled_v1']['regularize_to_baseline_lambda']``: the gamed rows' total weight."""
N_SPLITS = 5
"""Folds of the cross-validated choice of the L1 strength."""
RANDOM_STATE = 123


@dataclass
class Gamed:
    """AlpacaEval's precomputed rows, as their fit concatenates them: float (G,) ``preference`` in [0, 1],
    ``std_delta_len``, ``instruction_difficulty``; bool (G,) ``not_gamed``; and ``difficulty``: index -> the
    instruction difficulty their code looks up (the first row of each index, keyed by that row's number)."""

    preference: np.ndarray
    std_delta_len: np.ndarray
    instruction_difficulty: np.ndarray
    not_gamed: np.ndarray
    difficulty: dict[int, float]


def read_gamed(path: Path) -> Gamed:
    """Read AlpacaEval's ``df_gamed.csv`` (``.gz`` too); a missing column or a bad value names the file and row."""
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise ArenaError(f"{path}: cannot read the gamed rows: {err}") from err
    missing = [c for c in GAMED_COLUMNS if c not in df.columns]
    if missing:
        raise ArenaError(f"{path}: no column {', '.join(map(repr, missing))}: give AlpacaEval's df_gamed.csv "
                         f"(columns {', '.join(GAMED_COLUMNS)})")
    for col in ("preference", "std_delta_len", "instruction_difficulty"):
        bad = ~np.isfinite(pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64))
        if col == "preference":
            bad &= df[col].notna().to_numpy()  # a missing preference is dropped, as their fit drops it
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ArenaError(f"{path}:{row + 2}: {col} {df[col].iloc[row]!r} is not a number")
    flags = df["not_gamed_baseline"].map(_flag)
    if flags.isna().any():
        row = int(np.flatnonzero(flags.isna().to_numpy())[0])
        raise ArenaError(f"{path}:{row + 2}: not_gamed_baseline {df['not_gamed_baseline'].iloc[row]!r} is not "
                         "True or False")
    keep = df["preference"].notna().to_numpy()
    first = df.drop_duplicates("index")["instruction_difficulty"]  # their lookup: keyed by the row's label
    return Gamed(
        preference=df["preference"].to_numpy(dtype=np.float64)[keep],
        std_delta_len=df["std_delta_len"].to_numpy(dtype=np.float64)[keep],
        instruction_difficulty=df["instruction_difficulty"].to_numpy(dtype=np.float64)[keep],
        not_gamed=flags.to_numpy(dtype=bool)[keep],
        difficulty={int(k): float(v) for k, v in first.items()},
    )


def _flag(value: object) -> bool | None:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    text = str(value).strip().lower()
    return {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}.get(text)


def read_difficulty(path: Path) -> dict[int, float]:
    """Read an instruction-difficulty table: AlpacaEval's ``instruction_difficulty.csv`` (first column the
    index, the other the difficulty)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, index_col=0)
    except (OSError, ValueError) as err:
        raise ArenaError(f"{path}: cannot read the instruction difficulties: {err}") from err
    if df.shape[1] != 1:
        raise ArenaError(f"{path}: expected two columns (index, difficulty), found {df.shape[1] + 1}")
    out = {}
    for row, (k, v) in enumerate(df.iloc[:, 0].items()):
        try:
            out[int(k)] = float(v)
        except (TypeError, ValueError) as err:
            raise ArenaError(f"{path}:{row + 2}: index {k!r} or difficulty {v!r} is not a number") from err
    return out


def fit_probability_cv(x: np.ndarray, p: np.ndarray, weight: np.ndarray | None):
    """Return AlpacaEval's ``fit_LogisticRegressionCV(..., is_ytrue_proba=True)``: ``x`` float (N, F), ``p``
    float (N,) the targets in [0, 1], ``weight`` float (N,) or None."""
    import sklearn
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GroupKFold

    n = len(p)
    true_prob = np.r_[p, 1.0 - p]
    true_weight = None if weight is None else np.r_[weight, weight]
    sample_weight = true_prob if true_weight is None else true_prob * true_weight
    labels = np.r_[np.ones(n), np.zeros(n)]
    groups = np.r_[np.arange(n), np.arange(n)]
    with sklearn.config_context(enable_metadata_routing=True):
        scorer = make_scorer(_log_loss_continuous, response_method="predict_proba", greater_is_better=False)
        scorer = scorer.set_score_request(true_sample_weight=True, true_prob=True)
        model = LogisticRegressionCV(cv=GroupKFold(n_splits=N_SPLITS), scoring=scorer, random_state=RANDOM_STATE,
                                     dual=False, solver="liblinear", fit_intercept=False, **_l1())
        model.set_fit_request(sample_weight=True)
        model.fit(np.vstack([x, x]), labels, sample_weight=sample_weight, groups=groups,
                  true_sample_weight=true_weight, true_prob=true_prob)
    return model


def _l1() -> dict[str, object]:
    """Return the keywords of an L1 penalty: ``l1_ratios=(1,)`` from scikit-learn 1.8 on, where their
    ``penalty="l1"`` is deprecated (the same fit), ``penalty="l1"`` before."""
    import inspect

    from sklearn.linear_model import LogisticRegressionCV

    if "use_legacy_attributes" in inspect.signature(LogisticRegressionCV).parameters:
        return {"l1_ratios": (1.0,), "use_legacy_attributes": False}
    return {"penalty": "l1"}


def _log_loss_continuous(y_true, y_pred, true_prob, true_sample_weight=None):
    """Their ``logloss_continuous``: the weighted mean log loss of probability targets (clipped at 1e-15)."""
    y = np.where(y_true == 1, true_prob, 1 - true_prob)
    y_pred = np.clip(y_pred, 1e-15, 1 - 1e-15)
    loss = y * np.log(y_pred) + (1 - y) * np.log(1 - y_pred)
    if true_sample_weight is not None:
        loss = loss * true_sample_weight
    return -np.mean(loss)


def alpaca_eval_lc_win_rates(
    battles: Sequence[Battle],
    lengths: Mapping[tuple[str, str], float],
    reference: str,
    positions: Mapping[str, int],
    *,
    gamed: Gamed | None = None,
    difficulty: Mapping[int, float] | None = None,
    bootstrap: int = 0,
    seed: int = 0,
    ci: float = 0.95,
) -> list[LCWinRate]:
    """Return every model's raw and LC win rate against ``reference`` computed as AlpacaEval computes them
    (module docstring), best LC first. ``positions``: prompt id -> its index (test-set position); a battle
    on another prompt, or without both lengths, is left out (the latter counted and warned, as in lengthcontrol).
    The instruction difficulty comes from
    ``gamed`` (as theirs), else ``difficulty`` (index -> value), else this workspace's battles.
    ``bootstrap`` rounds resample the model's prompts (the gamed rows stay), the fit redone each time."""

    per_model: dict[str, list[tuple[int, int, float, float, float]]] = {}
    no_length: Counter[str] = Counter()
    seen_reference = False
    for order, b in enumerate(battles):
        if reference not in (b.model_a, b.model_b) or b.model_a == b.model_b:
            continue
        seen_reference = True
        model = b.model_b if b.model_a == reference else b.model_a
        lm, lr = lengths.get((b.prompt_id, model)), lengths.get((b.prompt_id, reference))
        if lm is None or lr is None:
            no_length[model] += 1
            continue
        if b.prompt_id not in positions:
            continue
        won = {"tie": 0.5, "model_a": 1.0, "model_b": 0.0}[b.outcome]
        points = won if b.model_a == model else 1.0 - won
        per_model.setdefault(model, []).extend([(positions[b.prompt_id], order, points, float(lm), float(lr))]
                                               * b.weight)
    if not seen_reference:
        raise ArenaError(f"no battles against the reference {reference!r}: give a model that played the others")
    if not per_model:
        raise ArenaError(f"the battles against {reference!r} have no answer lengths: import or generate the answers")
    warn_unknown_lengths(no_length, reference)
    models = list(per_model)
    # their rows are the annotations in the order of the instructions
    arrays = {m: np.array(sorted(per_model[m], key=lambda r: (r[0], r[1])), dtype=np.float64) for m in models}
    if gamed is not None:
        table: Mapping[int, float] | None = gamed.difficulty
    else:
        table = difficulty
    if table is None:
        own = _own_difficulty(arrays, models)
    out = []
    rng = np.random.default_rng(seed)
    alpha = (1.0 - ci) / 2.0
    for i, m in enumerate(models):
        a = arrays[m]
        index = a[:, 0].astype(np.int64)
        y, len_m, len_r = a[:, 2], a[:, 3], a[:, 4]
        if table is not None:
            unknown = sorted({int(k) for k in index if int(k) not in table})
            if unknown:
                raise ArenaError(f"the instruction-difficulty table has no index {unknown[0]} (and {len(unknown) - 1} "
                                 f"more) that {m!r} battled on: index is the prompt's position in the test set, "
                                 "AlpacaEval's when the test set is their 805 instructions in their order")
            d = np.array([table[int(k)] for k in index], dtype=np.float64)
        else:
            d = own[i]

        everything = np.arange(len(y))
        lc, coef = _fit_lc(everything, y, len_m, len_r, d, gamed)
        win_lo = win_hi = lc_lo = lc_hi = None
        if bootstrap > 0:
            prompts, inverse = np.unique(index, return_inverse=True)
            members = [np.flatnonzero(inverse == k) for k in range(prompts.size)]
            wins, lcs = np.empty(bootstrap), np.empty(bootstrap)
            for r in range(bootstrap):
                rows = np.concatenate([members[k] for k in np.sort(rng.integers(0, prompts.size, prompts.size))])
                wins[r] = 100.0 * y[rows].mean()
                lcs[r] = _fit_lc(rows, y, len_m, len_r, d, gamed)[0]
            win_lo, win_hi = (float(v) for v in np.quantile(wins, [alpha, 1 - alpha]))
            lc_lo, lc_hi = (float(v) for v in np.quantile(lcs, [alpha, 1 - alpha]))
        delta = len_m - len_r
        sd = float(np.std(delta))
        identified = _identified(_Rows(y=y, delta=delta, prompt=index, len_model=len_m, len_ref=len_r), sd)
        out.append(LCWinRate(
            model=m, reference=reference, battles=len(y), prompts=int(np.unique(index).size),
            win_rate=float(100.0 * y.mean()), win_low=win_lo, win_high=win_hi,
            lc_win_rate=lc, lc_low=lc_lo, lc_high=lc_hi,
            # their feature is the baseline's length minus the model's: + here still means "likes longer"
            length_coef=-float(coef[0]), difficulty_coef=float(coef[1]),
            avg_length=float(len_m.mean()), reference_avg_length=float(len_r.mean()),
            length_slope="alpaca-eval", length_identified=identified, unknown_length=no_length[m]))
    unidentified = [r.model for r in out if not r.length_identified]
    if unidentified:
        how = ("their gamed rows pin the slopes (a padded copy of the baseline is what they were made for)" if gamed
               is not None else "without their gamed rows (--gamed) its LC win rate is unreliable")
        warnings.warn(f"the length term of {', '.join(unidentified)} is not identified: longer (or shorter) than "
                      f"{reference} on nearly every prompt, so its own battles cannot tell the judge's length bias "
                      f"from its quality; {how}", UserWarning, stacklevel=2)
    out.sort(key=lambda r: -r.lc_win_rate)
    return out


def _fit_lc(rows: np.ndarray, y: np.ndarray, len_m: np.ndarray, len_r: np.ndarray, d: np.ndarray,
            gamed: Gamed | None) -> tuple[float, np.ndarray]:
    """Return (LC win rate, the fit's coefficients: length, difficulty, not gamed) of one model's rows
    ``rows`` (indices into its arrays: preference ``y``, lengths, difficulty ``d``), the gamed rows first."""
    from scipy.special import expit

    delta = len_r[rows] - len_m[rows]
    sd = float(np.std(delta, ddof=1)) if len(rows) > 1 else 0.0
    tanh = np.tanh(delta / sd) if sd > 0 else np.zeros(len(rows))  # their 0/0 is NaN; 0 carries no length
    x = np.column_stack([tanh, d[rows], np.ones(len(rows))])
    p, w = y[rows], None
    if gamed is not None:
        gx = np.column_stack([np.tanh(gamed.std_delta_len), gamed.instruction_difficulty,
                              gamed.not_gamed.astype(np.float64)])
        x, p = np.vstack([gx, x]), np.r_[gamed.preference, p]
        ng = np.r_[gamed.not_gamed, np.ones(len(rows), dtype=bool)]
        w = ng.astype(np.float64) + REGULARIZE_TO_BASELINE_LAMBDA * (~ng) / 2
    coef = fit_probability_cv(x, p, w).coef_[0]
    return float(100.0 * expit(coef[1] * d[rows] + coef[2]).mean()), coef


def _own_difficulty(arrays: Mapping[str, np.ndarray], models: list[str]) -> list[np.ndarray]:
    """Return per model float (its rows,): each row's instruction difficulty estimated from the other models'
    battles against the same reference (``lengthcontrol.leave_one_out_difficulty``)."""
    index_of: dict[int, int] = {}
    rows = []
    for m in models:
        a = arrays[m]
        prompt = np.array([index_of.setdefault(int(k), len(index_of)) for k in a[:, 0]], dtype=np.int64)
        rows.append(_Rows(y=a[:, 2], delta=a[:, 3] - a[:, 4], prompt=prompt, len_model=a[:, 3], len_ref=a[:, 4]))
    terms = leave_one_out_difficulty(rows, len(index_of))
    return [t[r.prompt] for t, r in zip(terms, rows)]
