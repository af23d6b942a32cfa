"""benchmarks/bench_judge_harvest.py: the harvested SFT answers are checked by the task suite's own checkers, the
two rounds are compared on the same prompts, and the truth's run differs from the judge's in its judge alone.

The runs themselves are flywheel rounds of many minutes, run by hand (figures in docs/results.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_learning.config import load_config_file
from arena_learning.flywheel.harvest import SFTItem
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.tasks.suite import generate_tasks

from .conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "flywheel-llm-judge.yaml"


def bench():
    return load_benchmark("bench_judge_harvest")


def _item(prompt, answer: str, teacher: str) -> SFTItem:
    return SFTItem(messages=[{"role": "user", "content": prompt.turns[0]}, {"role": "assistant", "content": answer}],
                   prompt_id=prompt.id, slice="D0", source_model=teacher)


def test_harvested_answers_are_checked_against_the_references_by_teacher_and_category():
    mod = bench()
    prompts = generate_tasks(24, seed=5, suite=2)
    right = [_item(p, p.reference[0], "qwen") for p in prompts[:10]]
    wrong = [_item(p, "no idea", "sample") for p in prompts[10:14]]
    got = mod.check_sft([*right, *wrong], prompts)
    assert (got.total, got.right) == (14, 10)
    assert got.wrong_share == pytest.approx(4 / 14)
    assert got.by_model == {"qwen": [10, 10], "sample": [0, 4]}
    assert sum(n for _, n in got.by_category.values()) == 14
    assert [w["answer"] for w in got.wrong_examples] == ["no idea"] * 4
    assert mod.check_sft([], prompts).wrong_share is None
    # an item whose prompt is not in the slice cannot be checked: said, not skipped
    with pytest.raises(SystemExit, match="no task-suite prompt"):
        mod.check_sft(right, prompts[10:])


def test_paired_exact_resamples_both_models_on_the_same_prompts():
    mod = bench()
    ids = [f"p{i}" for i in range(40)]
    cats = {i: ("even" if n % 2 == 0 else "odd") for n, i in enumerate(ids)}
    b = {i: n < 10 for n, i in enumerate(ids)}
    same = mod.paired_exact(b, dict(b), cats)
    assert (same.diff, same.ci_low, same.ci_high, same.gained, same.lost) == (0, 0, 0, {}, {})
    # A answers 12 more, loses 2 of B's: the difference is +10 with a CI above 0; counts per category
    a = {i: (n < 8 or 10 <= n < 22) for n, i in enumerate(ids)}
    got = mod.paired_exact(a, b, cats)
    assert (got.n, got.a, got.b, got.diff) == (40, 20, 10, 10)
    assert 0 < got.ci_low <= 10 <= got.ci_high
    assert got.gained == {"even": 6, "odd": 6} and got.lost == {"even": 1, "odd": 1}
    # only prompts both answered count
    assert mod.paired_exact({**a, "extra": True}, b, cats).n == 40
    with pytest.raises(ValueError, match="share no checked prompt"):
        mod.paired_exact({"x": True}, {"y": True}, {})


def test_the_truth_run_changes_the_judge_alone():
    mod = bench()
    judge = load_config_file(CONFIG, FlywheelConfig)
    truth = load_config_file(CONFIG, FlywheelConfig, mod.TRUTH)
    assert judge.judge.kind == "llm" and judge.judge.template == "own-reference"
    assert truth.judge.kind == "verifier" and judge.rating_judge == truth.rating_judge == truth.judge
    # the judge never grades its own weights: its model is no contestant
    assert judge.judge.model.model not in {r.model for r in [judge.target, *judge.references]}
    assert truth.model_dump(exclude={"judge"}) == judge.model_dump(exclude={"judge"})
    quick = load_config_file(CONFIG, FlywheelConfig, [*mod.QUICK, "pool.D0.n=12"])
    assert quick.tasks.n == 24 and quick.pool["D0"].n == 12 and quick.training.sft.max_steps == 1
