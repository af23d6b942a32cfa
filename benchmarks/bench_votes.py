"""Benchmark: the human board from scripted voters, the vote schedules, and the flagging of bad voters.

Run: ``python benchmarks/bench_votes.py [--models K] [--seeds N] [--quick] [--record]``

A synthetic workspace (a real store): K models (default 10) with hidden strengths evenly spaced over
700 Elo (about 78 Elo between neighbours), 60 prompts in three categories, every model's answer. A scripted
honest voter prefers model A to B with the Bradley-Terry probability of their strengths, and with
probability 0.1 gives a uniformly random verdict of the four (a, b, tie, both bad); on a control it
answers right (a tie for one answer twice, the real answer against an empty one) unless the noise
draws otherwise. Every vote goes through the schedule the page uses (``people.schedule.next_item``, 20% of
the items controls by default) and the store; the boards are ``arena leaderboard --judge human``'s
(Bradley-Terry, bootstrap over prompts). No LLM judge runs here, so no judge disagreement steers the
schedule: what it has is closeness on the votes so far and the even spread.

It prints (and ``--record`` appends to ``results.jsonl``):

1. Spearman of the human board with the true strengths after 200 votes (two honest voters taking
   turns; controls included in the 200), per seed; goal: the median over seeds at least 0.9.
2. Votes until that Spearman reaches 0.9 and stays there (checked every 10 votes, up to 400), for
   the informative schedule and for random pairs, per seed and in the mean; goal: informative needs fewer.
3. The share of seeds (200 by default) in which a random clicker (a uniformly random verdict, the same time
   per vote as an honest voter: the fast-vote rule does not help) is flagged within 30 votes (goal at
   least 95%), and in which an honest voter is flagged within 30 and within 100 votes (goal at most 5%).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402 - after the thread limits
from scipy.stats import spearmanr  # noqa: E402 - loads numpy: after the thread limits

from arena_learning.people.quality import VoterRule, flagged_voters  # noqa: E402
from arena_learning.people.schedule import EMPTY, Item, ScheduleOptions, next_item, vote_counts  # noqa: E402
from arena_learning.people.votes import rated_votes  # noqa: E402
from arena_learning.people.workspace import human_battles, vote_pool  # noqa: E402
from arena_learning.rating.bt import RateOptions, RatingWarning, fit_counts, leaderboard  # noqa: E402
from arena_learning.records import Answer, Prompt, Vote  # noqa: E402
from arena_learning.store import Store  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import emit  # noqa: E402 - benchmarks/results.py: the results log

ELO = np.log(10.0) / 400.0
SPAN_ELO = 700.0
PROMPTS = 60
NOISE = 0.1
VOTES = 200
TARGET = 0.9
MAX_VOTES = 400
STEP = 10
FLAG_VOTES = 30
VERDICTS = ("a", "b", "tie", "both_bad")

Voter = Callable[[Item, np.random.Generator], str]


def build(root: Path, k: int) -> dict[str, float]:
    """Write the synthetic workspace; return each model's true strength (natural units)."""
    models = [f"model-{n:02d}" for n in range(k)]
    strengths = dict(zip(models, np.linspace(-SPAN_ELO / 2, SPAN_ELO / 2, k) * ELO))
    with Store(root) as store:
        store.put_prompts("test", [Prompt(id=f"p{n:03d}", turns=[f"question {n}"],
                                          category=("code", "math", "writing")[n % 3]) for n in range(PROMPTS)])
        store.put_answers([Answer(prompt_id=f"p{n:03d}", model=m, turns=[f"answer of {m} to {n}"])
                           for n in range(PROMPTS) for m in models])
    return strengths


def honest(strengths: dict[str, float]) -> Voter:
    def choose(item: Item, rng: np.random.Generator) -> str:
        if rng.random() < NOISE:
            return str(rng.choice(VERDICTS))
        if item.control == "identical":
            return "tie"
        if EMPTY in (item.model_a, item.model_b):
            return "a" if item.model_b == EMPTY else "b"
        p = 1.0 / (1.0 + np.exp(strengths[item.model_b] - strengths[item.model_a]))
        return "a" if rng.random() < p else "b"
    return choose


def clicker(item: Item, rng: np.random.Generator) -> str:
    return str(rng.choice(VERDICTS))


def cast(pool, votes: list[Vote], voter: str, choose: Voter, options: ScheduleOptions,
         rng: np.random.Generator) -> Vote | None:
    """Cast one vote of ``voter`` on the item the schedule gives; append it to ``votes``."""
    item = next_item(pool, votes, voter, options, rng)
    if item is None:
        return None
    seconds = float(rng.lognormal(np.log(12.0), 0.5))
    n = len(votes)
    vote = Vote(vote_id=f"{voter}-{n:06d}", set_name=item.set_name, prompt_id=item.prompt_id, model_a=item.model_a,
                model_b=item.model_b, verdict=choose(item, rng), voter=voter, shown_at=float(n),
                voted_at=float(n) + seconds, seconds=seconds, control=item.control)
    votes.append(vote)
    return vote


def spearman_now(votes: Sequence[Vote], strengths: dict[str, float]) -> float:
    """Return Spearman of the votes' Bradley-Terry strengths (no bootstrap) with the truth."""
    models = sorted(strengths)
    wins, ties = vote_counts(rated_votes(votes), {m: n for n, m in enumerate(models)})
    theta, _ = fit_counts(wins, ties, prior_games=1.0)
    return float(spearmanr(theta, [strengths[m] for m in models]).statistic)


def headline(root: Path, strengths: dict[str, float], seed: int) -> tuple[float, float]:
    """Return (Spearman of the human board after VOTES votes of two voters with the truth, mean CI width in Elo)."""
    pool, votes, rng = vote_pool(root), [], np.random.default_rng(seed)
    choose = honest(strengths)
    with Store(root) as store:
        for n in range(VOTES):
            vote = cast(pool, votes, ("ann", "bob")[n % 2], choose, ScheduleOptions(seed=seed), rng)
            assert vote is not None
            assert store.record_vote(vote)
    battles, _ = human_battles(root)
    board = leaderboard(battles, RateOptions(bootstrap=100, seed=seed))
    rating = {r.model: r.rating for r in board}
    models = sorted(strengths)
    rho = float(spearmanr([rating[m] for m in models], [strengths[m] for m in models]).statistic)
    width = float(np.mean([r.ci_high - r.ci_low for r in board if r.ci_low is not None and r.ci_high is not None]))
    return rho, width


def votes_to_stay(pool, strengths: dict[str, float], mode: str, seed: int) -> float:
    """Return the votes after which Spearman with the truth stays >= TARGET up to MAX_VOTES (inf: never)."""
    votes: list[Vote] = []
    rng = np.random.default_rng(seed)
    options = ScheduleOptions(mode=mode, seed=seed)  # type: ignore[arg-type]  # "informative" or "random"
    choose = honest(strengths)
    reached = float("inf")
    for n in range(1, MAX_VOTES + 1):
        cast(pool, votes, ("ann", "bob")[n % 2], choose, options, rng)
        if n % STEP == 0:
            ok = spearman_now(votes, strengths) >= TARGET
            reached = (n if reached == float("inf") else reached) if ok else float("inf")
    return reached


def flagged_within(pool, choose: Voter, seed: int, horizon: int) -> bool:
    """Return whether the rule flags the voter at some vote up to ``horizon``."""
    votes: list[Vote] = []
    rng = np.random.default_rng(10_000 + seed)
    options, rule = ScheduleOptions(seed=seed), VoterRule()
    for _ in range(horizon):
        cast(pool, votes, "solo", choose, options, rng)
        if flagged_voters(votes, rule):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=10, help="seeds of parts 1 and 2")
    ap.add_argument("--flag-seeds", type=int, default=200, help="seeds of part 3")
    ap.add_argument("--quick", action="store_true", help="3 seeds, 40 flag seeds")
    ap.add_argument("--record", action="store_true", help="append the figures to results.jsonl")
    args = ap.parse_args(argv)
    seeds = range(3 if args.quick else args.seeds)
    flag_seeds = range(40 if args.quick else args.flag_seeds)
    warnings.simplefilter("ignore", RatingWarning)
    t0 = time.perf_counter()
    command = "python benchmarks/bench_votes.py" + (f" --models {args.models}" if args.models != 10 else "")
    control = ScheduleOptions().control_share
    setting = (f"{args.models} models {SPAN_ELO / (args.models - 1):.0f} Elo apart, honest voters with {NOISE:.0%} "
               f"noise, {control:.0%} controls")
    print(f"{setting}; {PROMPTS} prompts in 3 categories\n")

    print(f"1. Spearman of the human board with the truth after {VOTES} votes (two voters, controls included)")
    rhos = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            root = Path(tmp) / f"ws{seed}"
            strengths = build(root, args.models)
            rho, width = headline(root, strengths, seed)
            rhos.append(rho)
            print(f"   seed {seed}: Spearman {rho:.3f}, mean 95% CI width {width:.0f} Elo")
        median = float(np.median(rhos))
        ok1 = median >= TARGET
        print(f"   median {median:.3f}, min {min(rhos):.3f}: goal >= {TARGET} {'met' if ok1 else 'NOT met'}\n")

        root = Path(tmp) / "pool"
        strengths = build(root, args.models)
        pool = vote_pool(root)
        print(f"2. votes until Spearman with the truth stays >= {TARGET} (every {STEP} votes, up to {MAX_VOTES})")
        need: dict[str, list[float]] = {"informative": [], "random": []}
        for seed in seeds:
            for mode in need:
                need[mode].append(votes_to_stay(pool, strengths, mode, seed))
            print(f"   seed {seed}: informative {need['informative'][-1]:.0f}, random {need['random'][-1]:.0f}")
        capped = {m: np.minimum(v, MAX_VOTES + STEP) for m, v in need.items()}  # never: counted as MAX_VOTES + STEP
        mean = {m: float(np.mean(v)) for m, v in capped.items()}
        ratio = mean["informative"] / mean["random"]
        ok2 = ratio < 1.0
        print(f"   mean (never counted as {MAX_VOTES + STEP}): informative {mean['informative']:.0f}, random "
              f"{mean['random']:.0f}; informative / random {ratio:.2f}: goal < 1 {'met' if ok2 else 'NOT met'}\n")

        print(f"3. flagged by the default rule ({control:.0%} controls; {len(flag_seeds)} seeds)")
        rule = VoterRule()
        print(f"   rule: more than {rule.max_control_fail:.0%} of at least {rule.min_controls} checked controls "
              f"failed, or more than {rule.max_fast_share:.0%} of votes under {rule.fast_seconds:g} s")
        random_flag = np.mean([flagged_within(pool, clicker, s, FLAG_VOTES) for s in flag_seeds])
        honest_30 = np.mean([flagged_within(pool, honest(strengths), s, FLAG_VOTES) for s in flag_seeds])
        honest_100 = np.mean([flagged_within(pool, honest(strengths), s, 100) for s in flag_seeds])
    ok3 = random_flag >= 0.95 and honest_30 <= 0.05
    print(f"   random clicker flagged within {FLAG_VOTES} votes: {random_flag:.1%} of seeds (goal >= 95%)")
    print(f"   honest voter flagged within {FLAG_VOTES} votes: {honest_30:.1%}, within 100: {honest_100:.1%} "
          f"(goal <= 5%): {'met' if ok3 else 'NOT met'}")

    if not args.quick:
        note = f"{setting}; {len(seeds)} seeds"
        emit("votes.spearman_200", median, "rho", "higher", command, note + "; median over seeds",
             record_it=args.record)
        emit("votes.informative_over_random", ratio, "ratio", "lower", command,
             note + f"; mean votes until Spearman stays >= {TARGET}", record_it=args.record)
        emit("votes.random_clicker_flagged_30", float(random_flag), "share", "higher", command,
             f"{len(flag_seeds)} seeds, {control:.0%} controls", record_it=args.record)
        emit("votes.honest_flagged_30", float(honest_30), "share", "lower", command,
             f"{len(flag_seeds)} seeds, {control:.0%} controls, {NOISE:.0%} noise", record_it=args.record)
    ok = ok1 and ok2 and ok3
    print(f"\n{time.perf_counter() - t0:.1f} s; goals {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
