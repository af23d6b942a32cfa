"""benchmarks/bench_recipes.py builds each recipe's flywheel from one config: the rounds, and the target's own
samples exactly where the recipe says (the recipes' runs themselves are minutes to an hour, run by hand)."""

from __future__ import annotations

from pathlib import Path

from arena_learning.config import load_config_file
from arena_learning.flywheel.settings import FlywheelConfig

from .conftest import load_benchmark

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _data(name: str) -> dict:
    return load_config_file(EXAMPLES / name, FlywheelConfig, []).model_dump(mode="json", exclude_none=False)


def test_a_samples_recipe_samples_even_when_the_config_has_none():
    bench = load_benchmark("bench_recipes")
    data = _data("flywheel-qwen-dpo-rl.yaml")  # no harvest.samples: dumped as None
    assert data["harvest"]["samples"] is None
    rft = bench.recipe_config(data, "rft-dpo", quick=False)
    assert rft.harvest.samples is not None and rft.harvest.samples.k == 2
    assert [s.kind for r in rft.rounds for s in r.stages] == ["sft", "sft", "sft", "dpo"]
    sft3 = bench.recipe_config(data, "sft3", quick=False)
    assert sft3.harvest.samples is None


def test_a_samples_recipe_keeps_the_configs_own_samples_and_the_others_drop_them():
    bench = load_benchmark("bench_recipes")
    data = _data("flywheel-dpo-rl.yaml")
    own = data["harvest"]["samples"]
    assert own is not None
    rft = bench.recipe_config(data, "rft3", quick=False)
    assert rft.harvest.samples is not None and rft.harvest.samples.k == own["k"]
    assert bench.recipe_config(data, "sft-dpo-rl", quick=False).harvest.samples is None
