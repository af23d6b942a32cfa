"""Schedules: static pair lists, and the adaptive scheduler on a simulated judge."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from arena_learning.arena.schedule import (
    AdaptiveScheduler,
    all_pairs,
    baseline_pairs,
    run_schedule,
    schedule_pairs,
    target_pairs,
)
from arena_learning.errors import ArenaError
from arena_learning.records import Battle

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_schedule.py"


def load_bench():
    """The benchmark's simulated arena, so the test pins the property the benchmark prints."""
    spec = importlib.util.spec_from_file_location("bench_schedule", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_schedule"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = load_bench()


# --------------------------------------------------------------------------- static schedules


def test_all_pairs_keeps_config_order():
    assert all_pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]


def test_baseline_pairs_put_the_baseline_second_and_skip_it():
    assert baseline_pairs(["a", "base", "c"], "base") == [("a", "base"), ("c", "base")]


def test_baseline_must_be_a_model():
    with pytest.raises(ArenaError, match="baseline 'gpt4' is not one of the models"):
        baseline_pairs(["a", "b"], "gpt4")


def test_target_pairs_put_the_target_first_and_skip_itself():
    assert target_pairs("t", ["r1", "t", "r2"]) == [("t", "r1"), ("t", "r2")]
    with pytest.raises(ArenaError, match="at least one reference"):
        target_pairs("t", ["t"])


def test_schedule_pairs_dispatches_on_kind():
    models = ["a", "b", "c"]
    assert schedule_pairs("all", models) == all_pairs(models)
    assert schedule_pairs("baseline", models, baseline="b") == [("a", "b"), ("c", "b")]
    assert schedule_pairs("target", models, target="c") == [("c", "a"), ("c", "b")]


@pytest.mark.parametrize(
    ("kind", "kwargs", "message"),
    [
        ("swiss", {}, "unknown schedule 'swiss'"),
        ("baseline", {}, "needs a baseline"),
        ("target", {}, "needs a target"),
        ("target", {"target": "z"}, "target 'z' is not one of the models"),
        ("adaptive", {}, "AdaptiveScheduler"),
    ],
)
def test_schedule_pairs_errors_say_what_to_do(kind, kwargs, message):
    with pytest.raises(ArenaError, match=message):
        schedule_pairs(kind, ["a", "b", "c"], **kwargs)


def test_a_model_listed_twice_is_an_error():
    with pytest.raises(ArenaError, match="'a' is listed twice"):
        schedule_pairs("all", ["a", "b", "a"])


# --------------------------------------------------------------------------- adaptive


def test_adaptive_never_schedules_a_prompt_and_pair_twice_and_ends_when_all_are_used():
    arena = bench.simulate_arena(5, 7, seed=1)
    sched = AdaptiveScheduler(arena.models, arena.prompts, batch_size=6, budget=10_000, stop_z=np.inf, seed=3)
    seen = Counter()
    sizes = []
    while batch := sched.next_batch():
        sizes.append(len(batch))
        seen.update((p, frozenset((a, b))) for p, a, b in batch)
        sched.observe(arena.judge(batch))
    assert max(seen.values()) == 1
    assert len(seen) == sched.round_robin == 7 * 10
    assert max(sizes) <= 6
    assert sched.finished and sched.stop_reason == "every (prompt, pair) scheduled"
    assert sched.next_batch() == []


def test_adaptive_stays_within_budget_and_is_deterministic():
    arena = bench.simulate_arena(6, 20, seed=2)

    def run(seed):
        sched = AdaptiveScheduler(arena.models, arena.prompts, batch_size=7, budget=50, seed=seed)
        battles = run_schedule(sched, arena.judge)
        return sched, [(b.prompt_id, b.model_a, b.model_b) for b in battles]

    s1, first = run(seed=4)
    _, again = run(seed=4)
    _, other = run(seed=5)
    assert len(first) == s1.scheduled == 50 and s1.stop_reason == "budget spent"
    assert first == again
    assert first != other


def test_adaptive_warm_up_connects_every_model():
    models = [f"m{k}" for k in range(7)]
    sched = AdaptiveScheduler(models, [f"p{k}" for k in range(10)], batch_size=100, warmup_rounds=1, seed=0)
    batch = sched.next_batch()
    assert len(batch) == 7  # one Hamiltonian cycle: every model twice
    degree = Counter(m for _, a, b in batch for m in (a, b))
    assert set(degree) == set(models) and set(degree.values()) == {2}


def test_adaptive_stops_early_when_every_order_is_clear():
    # 150 Elo between neighbours: a few dozen battles settle every order
    arena = bench.simulate_arena(6, 200, seed=0, strengths=[0, 450, 150, 600, 300, 750])
    sched = AdaptiveScheduler(arena.models, arena.prompts, batch_size=15, seed=0)
    run_schedule(sched, arena.judge)
    assert sched.stop_reason.startswith("every pair is ordered")
    assert sched.scheduled < sched.budget / 4
    true_order = [arena.models[k] for k in np.argsort(-arena.strength)]
    assert sched.ranking() == true_order


def test_adaptive_rejects_a_battle_of_an_unknown_model():
    sched = AdaptiveScheduler(["a", "b"], ["p1"], seed=0)
    with pytest.raises(ArenaError, match="model 'zz', which is not in the schedule"):
        sched.observe([Battle(prompt_id="p1", model_a="a", model_b="zz", outcome="tie")])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adaptive_reaches_the_round_robin_ranking_with_half_the_calls(seed):
    # 12 models, 150 prompts: the same judge verdicts the round robin sees, a subset of them
    arena = bench.simulate_arena(12, 150, seed=seed)
    rr = bench.static_battles(arena, all_pairs(arena.models))
    battles, sched = bench.adaptive_battles(arena, seed=seed)
    assert len(battles) <= len(rr) / 2
    rho = bench.spearman(bench.ratings_of(battles, arena.models), bench.ratings_of(rr, arena.models))
    assert rho >= 0.98, f"Spearman {rho:.3f} vs the round robin with {len(battles)} of {len(rr)} battles"


def test_adaptive_needs_at_most_half_the_calls_of_random_in_the_hard_setting():
    # The benchmark's headline: calls until the minimum over seeds of Spearman with the full
    # round robin reaches 0.98, adaptive against the round robin's battles in random order.
    setting = bench.HARD
    curves = {"random": [], "adaptive": []}
    for seed in range(10):
        arena = bench.simulate_arena(int(setting["models"]), int(setting["prompts"]), seed=seed,
                                     spread=setting["spread"])
        for name, curve in bench.agreement_curves(arena, seed).items():
            curves[name].append(curve)
    need = {name: bench.first_reach(*bench.minimum_over_seeds(c)) for name, c in curves.items()}
    assert need["adaptive"] <= bench.TARGET_RATIO * need["random"], need


def test_minimum_over_seeds_steps_each_curve_and_first_reach_and_stay_differ():
    calls, rho = bench.minimum_over_seeds([(np.array([2, 6]), np.array([0.5, 0.99])),
                                           (np.array([4, 8]), np.array([0.985, 0.9]))])
    np.testing.assert_array_equal(calls, [2, 4, 6, 8])
    np.testing.assert_allclose(rho, [-1.0, 0.5, 0.985, 0.9])
    c, r = np.array([1, 2, 3, 4]), np.array([0.99, 0.97, 0.985, 0.99])
    assert bench.first_reach(c, r) == 1 and bench.calls_to_stay(c, r) == 3
    assert bench.first_reach(c, r - 0.1) == float("inf") and bench.calls_to_stay(c, r - 0.02) == float("inf")
