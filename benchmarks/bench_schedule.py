"""Benchmark: judge calls and ranking quality of each schedule, on a simulated judge.

Run: ``python benchmarks/bench_schedule.py [--models K] [--prompts P] [--seeds N] [--quick]``

The simulated arena: K models with known Bradley-Terry strengths (Elo scale), P prompts.
On a prompt a model's quality is its strength plus prompt noise (some prompts suit some
models). The judge plays each pair in both orders; a game has a position bias towards the
answer shown first and ties (P(tie) = tie_rate * 4p(1-p)); the battle goes to the model with
more points over its two games (a split is a tie), as a real two-order judge does. Every
(prompt, pair) outcome is drawn once up front, so every schedule reads the same verdicts a
cached judge would give: the adaptive schedule sees a subset of the round robin's data.

For each schedule it prints the judge calls used (2 per battle), the share of the full
round robin's calls, and the Spearman correlation of the Bradley-Terry ratings with the
true strengths and with the full round robin's ratings:

* all pairs: the full round robin, the reference;
* baseline: every model against the median model (arena-hard style) on every prompt;
* random half: half the round robin's battles drawn at random (the control for adaptive);
* adaptive: ``AdaptiveScheduler`` with at most half the round robin's calls.

The target: adaptive reaches Spearman >= 0.98 against the full round robin with <= 50% of
its calls, for every seed. Exits 1 if it does not.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from arena_learning.arena.schedule import AdaptiveScheduler, all_pairs, baseline_pairs, run_schedule  # noqa: E402
from arena_learning.rating.bt import RatingWarning, leaderboard  # noqa: E402
from arena_learning.records import Battle  # noqa: E402

GAMES_PER_BATTLE = 2  # both orders
TARGET_SPEARMAN = 0.98
TARGET_SHARE = 0.5
ELO = np.log(10.0) / 400.0  # natural units per Elo point


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
    adaptive, sched = adaptive_battles(arena, seed=seed)
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
    ap.add_argument("--models", type=int, default=12)
    ap.add_argument("--prompts", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 seeds")
    args = ap.parse_args(argv)
    seeds = range(2 if args.quick else args.seeds)
    ok = True
    t0 = time.perf_counter()
    print(f"{args.models} models, {args.prompts} prompts, both orders judged (2 calls per battle)")
    print("rho: Spearman of the BT ratings with the true strengths / with the full round robin's ratings;")
    print("wrong sep.: pairs the round robin separates at 95% that the schedule orders the other way")
    head = f"{'seed':>4}  {'schedule':<38} {'calls':>7} {'share':>6} {'rho true':>9} {'rho RR':>7} {'wrong sep.':>10}"
    print(head)
    by_schedule: dict[str, list[Row]] = {}
    for seed in seeds:
        arena = simulate_arena(args.models, args.prompts, seed=seed)
        for r in evaluate(arena, seed):
            name = "baseline (median model)" if r.schedule.startswith("baseline") else r.schedule
            by_schedule.setdefault(name, []).append(r)
            print(f"{seed:>4}  {r.schedule:<38} {r.calls:>7} {r.share:>6.1%} {r.rho_true:>9.3f} {r.rho_rr:>7.3f} "
                  f"{r.wrong_separated:>10}")
            if r.schedule.endswith("(default)"):
                ok &= r.rho_rr >= TARGET_SPEARMAN and r.share <= TARGET_SHARE
    print(f"\nover {len(seeds)} seeds: {'schedule':<32} {'share':>6} {'mean rho RR':>12} {'min rho RR':>11} "
          f"{'seeds >= ' + str(TARGET_SPEARMAN):>11}")
    for name, rows in by_schedule.items():
        rho = np.array([r.rho_rr for r in rows])
        print(f"{'':>15}{name:<32} {np.mean([r.share for r in rows]):>6.1%} {rho.mean():>12.3f} {rho.min():>11.3f} "
              f"{int((rho >= TARGET_SPEARMAN).sum()):>8}/{len(rows)}")
    verdict = "met" if ok else "NOT met"
    print(f"target (adaptive: Spearman vs round robin >= {TARGET_SPEARMAN} with <= {TARGET_SHARE:.0%} of the calls, "
          f"every seed): {verdict}; {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
