"""benchmarks/bench_rip.py: each preference pair graded by the task suite's checker, which knows the right answer."""

from __future__ import annotations

import pytest

from arena_learning.flywheel.harvest import PreferenceItem
from arena_learning.tasks import generate_tasks

from .conftest import load_benchmark


def pair(prompt, chosen: str, rejected: str) -> PreferenceItem:
    user = [{"role": "user", "content": prompt.turns[0]}]
    return PreferenceItem(prompt=user, chosen=[{"role": "assistant", "content": chosen}],
                          rejected=[{"role": "assistant", "content": rejected}], prompt_id=prompt.id)


def test_a_pair_is_clean_when_only_its_chosen_answer_is_right_and_noisy_when_its_chosen_answer_is_not(tmp_path):
    mod = load_benchmark("bench_rip")
    p = next(t for t in generate_tasks(12, seed=1, suite=2) if t.category == "arithmetic")
    right = p.reference[0]
    assert mod.grade(pair(p, right, "12"), p) == "clean"
    assert mod.grade(pair(p, "12", ""), p) == "noisy"  # a wrong answer preferred to none still teaches an error
    assert mod.grade(pair(p, right, right), p) == "other"
    with pytest.raises(SystemExit, match="no arena.db"):
        mod.main([str(tmp_path)])
