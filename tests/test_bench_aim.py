"""benchmarks/bench_aim.py: its arms are one config, aimed as written and evenly drawn, of the same draw and size.

The arms themselves are flywheel runs of about 20 minutes each, run by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_learning.config import load_config_file
from arena_learning.flywheel.settings import FlywheelConfig

from .conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def test_the_uniform_arm_is_the_aimed_config_drawn_evenly_and_a_draw_moves_both():
    mod = load_benchmark("bench_aim")
    path = ROOT / "examples" / "flywheel-aimed.yaml"
    args, cfg, sets = mod.parse([str(path), "--draw", "2"])
    aimed = load_config_file(path, FlywheelConfig, sets["aimed"])
    uniform = load_config_file(path, FlywheelConfig, sets["uniform"])
    assert [st.allocate for rnd in aimed.rounds for st in rnd.stages] == ["uniform", *["weakness"] * 3]
    assert [st.allocate for rnd in uniform.rounds for st in rnd.stages] == ["uniform", *["even"] * 3]
    assert uniform.aimed_slices() == aimed.aimed_slices() == {"D1", "D2", "D3"}  # the same candidates
    assert {k: v.n for k, v in uniform.pool.items()} == {k: v.n for k, v in aimed.pool.items()}
    assert {k: v.seed for k, v in aimed.pool.items()} == {k: v.seed + 2000 for k, v in cfg.pool.items()}
    assert uniform.pool == aimed.pool and args.draw == 2
    quick = mod.parse([str(path), "--quick"])[2]["uniform"]
    assert "tasks.n=48" in quick and "pool.D3.n=24" in quick


def test_a_config_with_nothing_aimed_and_a_negative_draw_are_refused(capsys):
    mod = load_benchmark("bench_aim")
    with pytest.raises(SystemExit, match="no stage of the config has allocate: weakness"):
        mod.parse([str(ROOT / "examples" / "flywheel-ladder.yaml")])
    with pytest.raises(SystemExit):
        mod.parse([str(ROOT / "examples" / "flywheel-aimed.yaml"), "--draw", "-1"])
    assert "give a draw number of 0 or more" in capsys.readouterr().err


def test_the_paired_exact_difference_and_its_interval():
    mod = load_benchmark("bench_aim")
    aimed = {f"p{i}": i < 30 for i in range(40)}
    uniform = {f"p{i}": i < 10 for i in range(40)}
    mean, lo, hi, n = mod.paired_exact(aimed, uniform)
    assert n == 40 and mean == pytest.approx(0.5) and 0.3 < lo < 0.5 < hi < 0.7
    same = mod.paired_exact(aimed, aimed)
    assert same == (0.0, 0.0, 0.0, 40)


def test_the_repeat_arm_is_the_uniform_arm_with_every_trainers_seed_moved():
    mod = load_benchmark("bench_aim")
    path = ROOT / "examples" / "flywheel-aimed.yaml"
    _, cfg, sets = mod.parse([str(path), "--replicate", "--set", "training.dpo.seed=7"])
    assert list(sets) == ["uniform", "aimed", "repeat"]
    uniform = load_config_file(path, FlywheelConfig, sets["uniform"])
    repeat = load_config_file(path, FlywheelConfig, sets["repeat"])
    assert repeat.training.dpo.seed == 8 and cfg.training.dpo.seed == 7
    for kind in mod.TRAINERS:
        assert getattr(repeat.training, kind).seed == getattr(uniform.training, kind).seed + 1
    assert repeat.model_copy(update={"training": uniform.training}) == uniform  # nothing else moves
    assert "repeat" not in mod.parse([str(path)])[2]


def test_each_rounds_models_are_paired_against_the_uniform_arms_of_the_same_round(tmp_path):
    from arena_learning.records import Answer
    from arena_learning.store import DEFAULT_SET, Store
    from arena_learning.tasks.suite import generate_tasks

    mod = load_benchmark("bench_aim")
    prompts = generate_tasks(40, seed=3)
    right = {"u-r0": range(10), "u-r1": range(20), "a-r0": range(10), "a-r1": range(30)}
    workspaces, reports = {}, {}
    for arm, models in (("uniform", ("u-r0", "u-r1")), ("aimed", ("a-r0", "a-r1"))):
        ws = workspaces[arm] = tmp_path / arm
        with Store(ws) as store:
            store.put_prompts(DEFAULT_SET, prompts)
            store.put_answers([Answer(prompt_id=p.id, model=m, turns=[p.reference[0] if i in right[m] else "no idea"])
                               for m in models for i, p in enumerate(prompts)])
        reports[arm] = {"rounds": [{"round": r, "model": m} for r, m in enumerate(models)]}
    line = mod.paired_rounds(reports, workspaces, "aimed")
    assert line.startswith("round 0 +0.000 [+0.000, +0.000]; round 1 +0.250 [")
    assert line.endswith("] (above 0 at the last)")
