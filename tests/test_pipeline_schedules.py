"""The battle stage under each schedule, on the task suite with imported answers and the verifier judge."""

from __future__ import annotations

import random

import pytest
from scipy.stats import spearmanr

from arena_learning import pipeline
from arena_learning.config import RunConfig, validate_config
from arena_learning.errors import ConfigError
from arena_learning.records import Answer
from arena_learning.store import Store

SKILL = {f"m{i:02d}": 0.15 + 0.06 * i for i in range(12)}  # chance of answering right


def setup(tmp_path, schedule, **battles):
    cfg = RunConfig.model_validate({
        "name": "s", "tasks": {"n": 150, "seed": 2},
        "models": [{"name": m, "engine": "imported"} for m in SKILL],
        "battles": {"schedule": schedule, **battles},
        "ratings": {"bootstrap": 0},
    })
    store = Store(tmp_path / "ws")
    rng = random.Random(0)
    prompts = pipeline.stage_prompts(cfg, store)
    store.put_answers(
        Answer(prompt_id=p.id, model=m, turns=[p.reference[0] if rng.random() < s else "no idea"])
        for p in prompts for m, s in SKILL.items()
    )
    return cfg, store


def battle(cfg, store):
    """Judge as `arena battle` does: on the test set the config names."""
    return pipeline.stage_battle(cfg, store, prompts=pipeline.stage_prompts(cfg, store), show_progress=False)


def test_all_baseline_and_target_schedules_pick_their_pairs(tmp_path):
    cfg, store = setup(tmp_path, "baseline", baseline="m05")
    pairs = {(b.model_a, b.model_b) for b in battle(cfg, store).battles}
    assert pairs == {(m, "m05") for m in SKILL if m != "m05"}
    cfg = cfg.model_copy(update={"battles": cfg.battles.model_copy(update={"schedule": "target", "target": "m00"})})
    report = battle(cfg, store)
    assert {(b.model_a, b.model_b) for b in report.battles} == {("m00", m) for m in SKILL if m != "m00"}
    assert len(report.battles) == 150 * 11
    # Battles are replaced, not accumulated, when the schedule changes.
    assert len(store.get_battles("verifier")) == 150 * 11


def test_adaptive_schedule_ranks_like_the_round_robin_with_half_the_battles(tmp_path):
    cfg, store = setup(tmp_path, "all")
    full = battle(cfg, store)
    full_board = {r.model: r.rating for r in pipeline.stage_ratings(cfg, store)}
    cfg = cfg.model_copy(update={"battles": cfg.battles.model_copy(update={"schedule": "adaptive"})})
    adaptive = battle(cfg, store)
    board = {r.model: r.rating for r in pipeline.stage_ratings(cfg, store)}
    assert len(adaptive.battles) <= len(full.battles) // 2
    models = sorted(SKILL)
    rho = spearmanr([full_board[m] for m in models], [board[m] for m in models]).statistic
    truth = spearmanr([SKILL[m] for m in models], [board[m] for m in models]).statistic
    assert rho >= 0.95 and truth >= 0.9, (rho, truth)
    assert len({(b.prompt_id, frozenset((b.model_a, b.model_b))) for b in adaptive.battles}) == len(adaptive.battles)


@pytest.mark.parametrize(
    "battles,error",
    [({"schedule": "baseline"}, "needs battles.baseline"),
     ({"schedule": "target", "target": "zz"}, "not one of the models")],
)
def test_schedule_config_errors(battles, error):
    data = {"models": [{"name": "a", "engine": "imported"}, {"name": "b", "engine": "imported"}], "battles": battles}
    with pytest.raises(ConfigError, match=error):
        validate_config(data, RunConfig, "x.yaml")
