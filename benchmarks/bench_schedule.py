"""Benchmark: judge calls and ranking quality of each schedule, on a simulated judge.

Run: ``python benchmarks/bench_schedule.py [--models K] [--prompts P] [--spread ELO] [--seeds N] [--easy] [--quick]``

The simulated arena: K models with known Bradley-Terry strengths (Elo scale), P prompts.
On a prompt a model's quality is its strength plus prompt noise (some prompts suit some
models). The judge plays each pair in both orders; a game has a position bias towards the
answer shown first and ties (P(tie) = tie_rate * 4p(1-p)); the battle goes to the model with
more points over its two games (a split is a tie), as a real two-order judge does. Every
(prompt, pair) outcome is drawn once up front, so every schedule reads the same verdicts a
cached judge would give: a schedule sees a subset of the round robin's data, and the full
round robin is the reference.

The default is the hard setting: 12 models (strength sd 100 Elo) on 100 prompts per pair,
a third of the easy setting's 300. A pair's round robin then measures its difference to
about +-35 Elo while neighbouring models are about 30 Elo apart, so the round robin's own
order of several neighbours is close to a coin flip that only most of its data decides:
a random subset has to be large to reproduce it (the random control needs 87% of the
calls before every seed agrees at 0.98). ``--easy`` (300 prompts per pair) is the old
default, where any half of the data, random or not, ranks like the round robin.
``--prompts 40 --spread 60`` is closer still: there nearly every neighbour is a coin flip
of the round robin, random needs 99% of the calls and adaptive about 80% (none of the
variants tried, a one-step look-ahead and one told the round robin's ratings among them,
got near half: such an order is decided by almost all the battles of the models involved).

It prints two things:

1. Calls to agreement, the headline: for the random control (the round robin's battles in
   a random order) and for ``AdaptiveScheduler`` (run to the whole round robin), the
   Spearman correlation of their Bradley-Terry ratings with the full round robin's after
   every batch of 64 battles; per seed, the calls at which it first reaches 0.98 and the
   calls after which it stays there; and the calls at which the minimum over seeds of
   Spearman first reaches 0.98 (every seed at once). The goal: adaptive needs at most
   half the calls random needs, on that minimum. Exits 1 when it does not.
2. Per seed, each schedule at a fixed budget (calls, share of the round robin, Spearman
   with the true strengths and with the round robin, pairs ordered against a separation
   the round robin makes at 95%): the round robin, every model against the median model,
   a random half, adaptive at 25% and at 50% (its default budget).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

# one BLAS thread: set before numpy loads its BLAS
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402 - after the thread limits
from scipy.stats import spearmanr  # noqa: E402 - loads numpy: after the thread limits

from arena_learning.arena.schedule import (  # noqa: E402 - loads numpy: after the thread limits
    AdaptiveScheduler,
    all_pairs,
    baseline_pairs,
    run_schedule,
)
from arena_learning.rating.bt import (  # noqa: E402 - loads numpy: after the thread limits
    RatingWarning,
    fit_counts,
    fits_exist,
    leaderboard,
)
from arena_learning.records import Battle  # noqa: E402 - loads numpy: after the thread limits

GAMES_PER_BATTLE = 2  # both orders
TARGET_SPEARMAN = 0.98
TARGET_RATIO = 0.5  # adaptive's calls to TARGET_SPEARMAN over random's
ELO = np.log(10.0) / 400.0  # natural units per Elo point
BATCH = 64  # battles per batch: AdaptiveScheduler's default, and the random control's step
HARD = {"models": 12, "prompts": 100, "spread": 100.0}
EASY = {"models": 12, "prompts": 300, "spread": 100.0}


@dataclass(frozen=True)
class SimArena:
    """A simulated arena with every (prompt, pair) verdict drawn up front.

    Attributes:
        models: the K model names, strongest first is not implied (shuffled).
        strength: float64 (K,), true Elo strengths.
        prompts: the P prompt ids.
        outcome: int8 (P, K, K), for i < j: 0 = i won, 1 = j won, 2 = tie (below the
            diagonal unused).
    """

    models: list[str]
    strength: np.ndarray
    prompts: list[str]
    outcome: np.ndarray

    def judge(self, batch: Sequence[tuple[str, str, str]]) -> list[Battle]:
        """Return the battles of ``batch`` (prompt_id, model_a, model_b), as a judge would."""
        index = {m: i for i, m in enumerate(self.models)}
        prompt = {p: k for k, p in enumerate(self.prompts)}
        out = []
        for pid, a, b in batch:
            i, j = index[a], index[b]
            lo, hi = min(i, j), max(i, j)
            code = int(self.outcome[prompt[pid], lo, hi])
            if code == 2:
                result = "tie"
            else:
                lo_won = code == 0
                result = "model_a" if lo_won == (i == lo) else "model_b"
            out.append(Battle(prompt_id=pid, model_a=a, model_b=b, outcome=result, judge="sim", games=2))
        return out


def simulate_arena(
    n_models: int = 12,
    n_prompts: int = 100,
    *,
    seed: int = 0,
    spread: float = 100.0,
    prompt_noise: float = 60.0,
    position_bias: float = 40.0,
    tie_rate: float = 0.3,
    strengths: Sequence[float] | None = None,
) -> SimArena:
    """Return a simulated arena.

    Args:
        spread: sd of the true Elo strengths (normal draws; Chatbot Arena's top models
            span a few hundred points).
        prompt_noise: sd (Elo) of a model's quality on one prompt around its strength.
        position_bias: Elo bonus of the answer shown first in a game.
        tie_rate: P(tie) of a game = tie_rate * 4 p (1 - p).
        strengths: the true Elo strengths (n_models of them) instead of normal draws.
    """
    rng = np.random.default_rng(seed)
    strength = rng.normal(0.0, spread, n_models)
    if strengths is not None:
        strength = np.asarray(strengths, dtype=np.float64)
    models = [f"m{k:02d}" for k in range(n_models)]
    quality = strength[None, :] + prompt_noise * rng.normal(size=(n_prompts, n_models))  # (P, K)
    diff = quality[:, :, None] - quality[:, None, :]  # (P, K, K): i minus j

    def game_points(d: np.ndarray) -> np.ndarray:
        """Points (1, 0.5, 0) of the first-shown model for Elo advantage d."""
        p = 1.0 / (1.0 + np.exp(-d * ELO))
        tie = tie_rate * 4.0 * p * (1.0 - p)
        u = rng.random(d.shape)
        return np.where(u < p - tie / 2, 1.0, np.where(u < p + tie / 2, 0.5, 0.0))

    # game 1: i shown first; game 2: j shown first (points of i = 1 - points of j)
    points_i = game_points(diff + position_bias) + (1.0 - game_points(-diff + position_bias))
    outcome = np.where(points_i > 1.0, 0, np.where(points_i < 1.0, 1, 2)).astype(np.int8)
    return SimArena(models, strength, [f"p{k:04d}" for k in range(n_prompts)], outcome)


def ratings_of(battles: Sequence[Battle], models: Sequence[str]) -> np.ndarray:
    """Return the Bradley-Terry ratings float64 (K,) of ``battles``, in ``models`` order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RatingWarning)  # a sparse schedule may need the prior
        board = {r.model: r.rating for r in leaderboard(battles, bootstrap=0)}
    return np.array([board.get(m, np.nan) for m in models])


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return float(spearmanr(x, y).statistic)


def static_battles(arena: SimArena, pairs: Sequence[tuple[str, str]]) -> list[Battle]:
    """Return the battles of ``pairs`` on every prompt."""
    return arena.judge([(p, a, b) for p in arena.prompts for a, b in pairs])


def random_battles(arena: SimArena, n: int, seed: int) -> list[Battle]:
    """Return ``n`` (prompt, pair) battles drawn without replacement."""
    units = [(p, a, b) for p in arena.prompts for a, b in all_pairs(arena.models)]
    pick = np.random.default_rng(seed).choice(len(units), size=n, replace=False)
    return arena.judge([units[k] for k in sorted(pick)])


def adaptive_battles(
    arena: SimArena, *, seed: int, batch_size: int | None = None, **kw
) -> tuple[list[Battle], AdaptiveScheduler]:
    """Return the battles the adaptive schedule judged (budget: half the round robin) and the scheduler."""
    k = len(arena.models)
    # batches of about one battle per pair: the fit is refreshed often, and it is a
    # realistic batch for parallel judging
    size = batch_size or max(16, k * (k - 1) // 2)
    sched = AdaptiveScheduler(arena.models, arena.prompts, batch_size=size, seed=seed, **kw)
    return run_schedule(sched, arena.judge), sched


def bt_ratings(wins: np.ndarray, ties: np.ndarray) -> np.ndarray:
    """Return Bradley-Terry strengths float64 (K,) of counts (K, K), ties half a win.

    As ``leaderboard`` does without bootstrap: the exact MLE, or with one virtual game per
    model where it does not exist. Only the order matters here.
    """
    prior = 0.0 if fits_exist(wins, ties)[0] else 1.0
    theta, _ = fit_counts(wins, ties, prior_games=prior)
    return theta


def add_battles(wins: np.ndarray, ties: np.ndarray, arena: SimArena, battles: Sequence[Battle]) -> None:
    """Add ``battles`` to the counts ``wins`` (K, K) and ``ties`` (K, K) in place."""
    index = {m: i for i, m in enumerate(arena.models)}
    a = np.array([index[b.model_a] for b in battles])
    b = np.array([index[b.model_b] for b in battles])
    o = np.array([b.outcome for b in battles])
    np.add.at(wins, (a[o == "model_a"], b[o == "model_a"]), 1.0)
    np.add.at(wins, (b[o == "model_b"], a[o == "model_b"]), 1.0)
    np.add.at(ties, (a[o == "tie"], b[o == "tie"]), 1.0)
    np.add.at(ties, (b[o == "tie"], a[o == "tie"]), 1.0)


def agreement_curve(arena: SimArena, batches: Sequence[Sequence[Battle]], reference: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Return (calls (B,), Spearman with ``reference`` (B,)) after each of ``batches`` in turn."""
    k = len(arena.models)
    wins, ties = np.zeros((k, k)), np.zeros((k, k))
    calls, rho, n = [], [], 0
    for batch in batches:
        add_battles(wins, ties, arena, batch)
        n += len(batch)
        calls.append(GAMES_PER_BATTLE * n)
        rho.append(spearman(bt_ratings(wins, ties), reference))
    return np.array(calls), np.array(rho)


def first_reach(calls: np.ndarray, rho: np.ndarray, target: float = TARGET_SPEARMAN) -> float:
    """Return the first calls at which ``rho`` is >= ``target`` (inf if never)."""
    hit = np.flatnonzero(rho >= target)
    return float(calls[hit[0]]) if hit.size else float("inf")


def calls_to_stay(calls: np.ndarray, rho: np.ndarray, target: float = TARGET_SPEARMAN) -> float:
    """Return the calls after which ``rho`` stays >= ``target`` (inf if it ends below)."""
    below = np.flatnonzero(rho < target)
    if below.size == 0:
        return float(calls[0])
    if below[-1] == rho.shape[0] - 1:
        return float("inf")
    return float(calls[below[-1] + 1])


def minimum_over_seeds(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Return (calls, the minimum over seeds of Spearman at those calls) of per-seed curves.

    A seed's Spearman at c calls is the one after its last batch that ended at or before c.
    """
    grid = np.unique(np.concatenate([c for c, _ in curves]))
    at = [np.where(idx >= 0, r[np.maximum(idx, 0)], -1.0)
          for c, r in curves for idx in [np.searchsorted(c, grid, side="right") - 1]]
    return grid, np.min(at, axis=0)


def adaptive_curve(arena: SimArena, reference: np.ndarray, *, seed: int, batch_size: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Run ``AdaptiveScheduler`` over the whole round robin; return its agreement curve."""
    sched = AdaptiveScheduler(arena.models, arena.prompts, batch_size=batch_size, seed=seed,
                              budget=len(arena.prompts) * len(all_pairs(arena.models)), stop_z=np.inf)
    batches = []
    while batch := sched.next_batch():
        battles = arena.judge(batch)
        sched.observe(battles)
        batches.append(battles)
    return agreement_curve(arena, batches, reference)


def random_curve(arena: SimArena, reference: np.ndarray, *, seed: int, batch_size: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The round robin's battles in a random order, in batches of ``batch_size``: the control."""
    units = [(p, a, b) for p in arena.prompts for a, b in all_pairs(arena.models)]
    order = np.random.default_rng(seed).permutation(len(units))
    battles = arena.judge([units[k] for k in order])
    return agreement_curve(arena, [battles[i : i + batch_size] for i in range(0, len(battles), batch_size)], reference)


def agreement_curves(arena: SimArena, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return, for random and adaptive, (calls, Spearman with the full round robin) after each batch."""
    k = len(arena.models)
    wins, ties = np.zeros((k, k)), np.zeros((k, k))
    add_battles(wins, ties, arena, static_battles(arena, all_pairs(arena.models)))
    reference = bt_ratings(wins, ties)
    return {
        "random": random_curve(arena, reference, seed=seed, batch_size=BATCH),
        "adaptive": adaptive_curve(arena, reference, seed=seed, batch_size=BATCH),
    }


@dataclass
class Row:
    schedule: str
    calls: int
    share: float
    rho_true: float
    rho_rr: float
    wrong_separated: int


def evaluate(arena: SimArena, seed: int) -> list[Row]:
    """Return one Row per schedule for ``arena``.

    ``wrong_separated`` counts the pairs the round robin separates (95% bootstrap
    intervals apart) that the schedule orders the other way: the disagreements that are
    not coin flips of the round robin itself.
    """
    models = arena.models
    rr = static_battles(arena, all_pairs(models))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RatingWarning)
        board = {r.model: r for r in leaderboard(rr, bootstrap=100, seed=seed)}
    rr_ratings = np.array([board[m].rating for m in models])
    lo = np.array([board[m].ci_low for m in models])
    hi = np.array([board[m].ci_high for m in models])
    separated = lo[:, None] > hi[None, :]  # (K, K): i confidently above j
    rr_calls = GAMES_PER_BATTLE * len(rr)

    def row(name: str, battles: Sequence[Battle]) -> Row:
        r = ratings_of(battles, models)
        calls = GAMES_PER_BATTLE * len(battles)
        wrong = int((separated & (r[:, None] < r[None, :])).sum())
        return Row(name, calls, calls / rr_calls, spearman(r, arena.strength), spearman(r, rr_ratings), wrong)

    median_model = models[int(np.argsort(arena.strength)[len(models) // 2])]
    adaptive, _ = adaptive_battles(arena, seed=seed)
    quarter, _ = adaptive_battles(arena, seed=seed, budget=len(rr) // 4)
    return [
        row("all pairs (round robin)", rr),
        row(f"baseline {median_model} (median model)", static_battles(arena, baseline_pairs(models, median_model))),
        row("random half of the round robin", random_battles(arena, len(rr) // 2, seed)),
        row("adaptive, budget 25%", quarter),
        row("adaptive, budget 50% (default)", adaptive),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int)
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--spread", type=float, help="sd of the true strengths, Elo")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--easy", action="store_true", help="12 models 100 Elo apart, 300 prompts: the old default")
    ap.add_argument("--quick", action="store_true", help="2 seeds")
    args = ap.parse_args(argv)
    setting = dict(EASY if args.easy else HARD)
    for key in setting:
        if getattr(args, key) is not None:
            setting[key] = getattr(args, key)
    seeds = range(2 if args.quick else args.seeds)
    t0 = time.perf_counter()
    k, n_prompts, spread = int(setting["models"]), int(setting["prompts"]), float(setting["spread"])
    arenas = {seed: simulate_arena(k, n_prompts, seed=seed, spread=spread) for seed in seeds}
    rr_calls = GAMES_PER_BATTLE * n_prompts * k * (k - 1) // 2
    print(f"{'easy' if args.easy else 'hard'} setting: {k} models (strength sd {spread:g} Elo), {n_prompts} prompts "
          f"per pair, both orders judged (2 calls per battle); round robin {rr_calls} calls")

    print(f"\n1. judge calls until Spearman with the full round robin reaches {TARGET_SPEARMAN} "
          f"(checked after every batch of {BATCH} battles)")
    print(f"{'seed':>4}  {'random reach':>12} {'stays':>6}  {'adaptive reach':>14} {'stays':>6}")
    curves: dict[str, list] = {"random": [], "adaptive": []}
    per_seed: dict[str, list[tuple[float, float]]] = {"random": [], "adaptive": []}
    for seed in seeds:
        for name, curve in agreement_curves(arenas[seed], seed).items():
            curves[name].append(curve)
            per_seed[name].append((first_reach(*curve), calls_to_stay(*curve)))
        (rr, rs), (ar, as_) = per_seed["random"][-1], per_seed["adaptive"][-1]
        print(f"{seed:>4}  {rr:>12.0f} {rs:>6.0f}  {ar:>14.0f} {as_:>6.0f}")
    mean = {n: np.mean(v, axis=0) for n, v in per_seed.items()}
    print(f"{'mean':>4}  {mean['random'][0]:>12.0f} {mean['random'][1]:>6.0f}  {mean['adaptive'][0]:>14.0f} "
          f"{mean['adaptive'][1]:>6.0f}   (adaptive / random: reach {mean['adaptive'][0] / mean['random'][0]:.2f}, "
          f"stays {mean['adaptive'][1] / mean['random'][1]:.2f})")
    # the headline: the minimum over seeds of Spearman, i.e. every seed at once
    need = {name: first_reach(*minimum_over_seeds(c)) for name, c in curves.items()}
    ratio = need["adaptive"] / need["random"]
    ok = ratio <= TARGET_RATIO
    print(f"\nminimum over seeds of Spearman >= {TARGET_SPEARMAN}: random after {need['random']:.0f} calls "
          f"({need['random'] / rr_calls:.0%} of the round robin), adaptive after {need['adaptive']:.0f} "
          f"({need['adaptive'] / rr_calls:.0%}); adaptive / random = {ratio:.2f}")
    print(f"goal (adaptive needs at most {TARGET_RATIO:.0%} of the calls random needs): {'met' if ok else 'NOT met'}")

    print("\n2. each schedule at a fixed budget")
    print("rho: Spearman of the BT ratings with the true strengths / with the full round robin's ratings;")
    print("wrong sep.: pairs the round robin separates at 95% that the schedule orders the other way")
    print(f"{'seed':>4}  {'schedule':<38} {'calls':>7} {'share':>6} {'rho true':>9} {'rho RR':>7} {'wrong sep.':>10}")
    by_schedule: dict[str, list[Row]] = {}
    for seed in seeds:
        for r in evaluate(arenas[seed], seed):
            name = "baseline (median model)" if r.schedule.startswith("baseline") else r.schedule
            by_schedule.setdefault(name, []).append(r)
            print(f"{seed:>4}  {r.schedule:<38} {r.calls:>7} {r.share:>6.1%} {r.rho_true:>9.3f} {r.rho_rr:>7.3f} "
                  f"{r.wrong_separated:>10}")
    print(f"\nover {len(seeds)} seeds: {'schedule':<32} {'share':>6} {'mean rho RR':>12} {'min rho RR':>11} "
          f"{'seeds >= ' + str(TARGET_SPEARMAN):>11}")
    for name, rows in by_schedule.items():
        rho = np.array([r.rho_rr for r in rows])
        print(f"{'':>15}{name:<32} {np.mean([r.share for r in rows]):>6.1%} {rho.mean():>12.3f} {rho.min():>11.3f} "
              f"{int((rho >= TARGET_SPEARMAN).sum()):>8}/{len(rows)}")
    print(f"\n{time.perf_counter() - t0:.1f} s; goal {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
