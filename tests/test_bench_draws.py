"""benchmarks/bench_draws.py: each draw is the config with other slices and sample seeds, the same test set;
the goals are counted as issue 18 states them.

The draws themselves are flywheel runs of about 16 minutes each, run by hand (figures in docs/results.md).
"""

from __future__ import annotations

from pathlib import Path

from arena_learning.config import load_config_file
from arena_learning.flywheel.settings import FlywheelConfig

from .conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def bench():
    return load_benchmark("bench_draws")


def test_a_draw_moves_the_slices_and_samples_seeds_and_keeps_the_test_set():
    mod = bench()
    path = ROOT / "examples" / "flywheel-same-weights.yaml"
    cfg = load_config_file(path, FlywheelConfig)
    assert mod.draw_sets(cfg, 0) == []
    two = load_config_file(path, FlywheelConfig, mod.draw_sets(cfg, 2))  # as the draw's `arena flywheel --set`s
    assert {k: v.seed for k, v in two.pool.items()} == {k: v.seed + 2000 for k, v in cfg.pool.items()}
    assert two.harvest.samples.seed == cfg.harvest.samples.seed + 2
    assert two.tasks == cfg.tasks and two.rounds == cfg.rounds and two.training == cfg.training
    assert two.references == cfg.references and two.target == cfg.target
    # a slice without a seed moves from its default (1000 + its position), as the flywheel makes it
    unseeded = load_config_file(path, FlywheelConfig, ["pool.D2.seed=null"])
    moved = load_config_file(path, FlywheelConfig, ["pool.D2.seed=null", *mod.draw_sets(unseeded, 1)])
    assert moved.pool["D2"].seed == FlywheelConfig.slice_seed(2, unseeded.pool["D2"]) + 1000 == 2002


def test_the_goals_are_issue_18s():
    mod = bench()
    rising = mod.DrawResult(0, 16.0, deltas=[(18.0, 10, 30), (12.4, -1, 27), (5.7, -5, 18)], exact=[28, 37, 42, 56],
                            of=288, span={"rating": 20.0, "ci_low": 3.0, "ci_high": 35.0}, union_refs=38)
    assert all(rising.goals().values())
    fell = mod.DrawResult(0, 16.0, deltas=[(18.0, 10, 30), (-9.5, -25, 4)], exact=[28, 37, 42, 53, 52], of=288,
                          span={"rating": 8.0, "ci_low": -7.9, "ci_high": 24.3}, union_refs=38,
                          shortcuts=["yes_no: yes (agrees on 100%)"])
    assert fell.goals() == {"every delta > 0": False, "last vs two before: CI > 0": False,
                            "1.3x exact of two before": False, "above the references' union": True,
                            "no shortcut": False}
