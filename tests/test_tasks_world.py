"""Suite 2, the flywheel's world: capacity, tiers, checkers, and shortcuts at chance in every category."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter

import pytest

from arena_learning.config import RunConfig, load_config_file
from arena_learning.errors import ConfigError
from arena_learning.flywheel.settings import SliceSpec
from arena_learning.flywheel.slices import task_slice
from arena_learning.tasks import check, check_date, generate_tasks, suite_categories
from arena_learning.tasks.shortcuts import POLICIES, SurfaceChance, follows_shortcut, policy_exact
from arena_learning.tasks.world import CATEGORIES, CATEGORY_INFO, WORDS

STRUCTURAL = {"first number", "second number", "last number", "largest number", "smallest number", "yes", "no",
              "ascending, whatever asked", "descending, whatever asked", "numbers as shown", "numbers reversed",
              "quoted text as shown", "longest quoted word", "quoted text upper", "quoted text lower",
              "quoted text capitalized", "the question", "yes or no"}


def test_suite_one_is_unchanged():
    # the prompts of suite 1 (the default) are byte for byte those of every earlier release
    prompts = generate_tasks(360, seed=0)
    digest = hashlib.sha256(json.dumps([p.model_dump() for p in prompts], sort_keys=True).encode()).hexdigest()
    assert digest == "280107fe0e5ce61edc01457f751f609a66fab826bd07866d873c6c37cfd641f0"
    assert suite_categories(1)[1] == "capitals" and "capitals" not in suite_categories(2)


def test_world_fills_a_test_set_and_ten_slices_of_320_with_distinct_items():
    test = generate_tasks(288, seed=0, suite=2)
    banned = {" ".join(t.lower().split()) for p in test for t in p.turns}
    made = []
    for k in range(10):
        got = task_slice(SliceSpec(n=320), seed=101 + k, exclude=banned, suite=2)
        assert len(got) == 320, k
        assert Counter(p.category for p in got) == {c: 320 // 12 + (1 if i < 320 % 12 else 0)
                                                    for i, c in enumerate(CATEGORIES)}
        banned |= {" ".join(p.turns[0].lower().split()) for p in got}
        made += got
    questions = [p.turns[0] for p in [*test, *made]]
    assert len(set(questions)) == len(questions) == 288 + 3200
    # headroom: every category holds at least 600 distinct items
    for cat in CATEGORIES:
        assert len(generate_tasks(600, seed=9, suite=2, categories=[cat])) == 600


def test_every_reference_scores_ten_and_a_refusal_zero_and_tiers_are_balanced():
    prompts = generate_tasks(12 * 60, seed=3, suite=2)
    for p in prompts:
        assert check(p, [p.reference[0]]) == 10.0, p
        assert check(p, ["I do not know"]) == 0.0, p
        assert p.source == "builtin-tasks-v2"
    for cat in CATEGORIES:
        tiers = Counter(p.meta["tier"] for p in prompts if p.category == cat)
        assert set(tiers) == {1, 2, 3}, (cat, tiers)
        assert max(tiers.values()) <= 2 * min(tiers.values()), (cat, tiers)
    assert all(w != w[::-1] for w in WORDS)          # a palindrome spelled backwards is its own echo


def test_no_shortcut_beats_chance_in_any_category():
    """A constant, positional, length or direction-blind answer scores at the category's chance level."""
    big = policy_exact(generate_tasks(12 * 480, seed=11, suite=2))
    assert set(big) == set(CATEGORIES)
    for cat, row in big.items():
        chance = CATEGORY_INFO[cat].chance
        # the best constant is picked on these very 480 items: three binomial standard deviations above chance
        # (1.3 points at chance 2%); the structural policies are balanced by construction, so chance itself
        margin = 3 * math.sqrt(chance * (1 - chance) / 480)
        for policy, share in row.items():
            assert share <= chance + (1e-9 if policy in STRUCTURAL else margin), (cat, policy, share, chance)
    # balance is by construction, not by luck: on the quickstart's 24 items per category the structural
    # policies (positions, yes/no, sort direction) score at most chance exactly, which leaves no single hit
    # (1/24 = 4.2%) where chance is below it (arithmetic 2%, reverse 1%, sequence 3%)
    small = policy_exact(generate_tasks(288, seed=0, suite=2))
    for cat, row in small.items():
        chance = CATEGORY_INFO[cat].chance
        for policy in STRUCTURAL:
            assert row[policy] <= chance + 1e-9, (cat, policy, row[policy], chance)
    assert small["comparison"]["first number"] == small["comparison"]["second number"] == 0.5
    assert small["yes_no"]["yes"] == small["sorting"]["ascending, whatever asked"] == 0.5


def test_no_shortcut_earns_partial_credit_above_chance():
    """Each policy's mean score (partial credit included) is at most 10 x its category's chance level.

    Before stop 31 the checkers paid an echo of the question: the word to uppercase written as shown
    (5 points), both numbers of a comparison (the right one "buried": 3), an operand within 10% of a sum.
    """
    prompts = generate_tasks(12 * 480, seed=11, suite=2)
    assert set(POLICIES) == STRUCTURAL
    for cat in CATEGORIES:
        items = [p for p in prompts if p.category == cat]
        for name, fn in POLICIES.items():
            mean = sum(check(p, [fn(p.turns[0])]) for p in items) / len(items)
            assert mean <= 10 * CATEGORY_INFO[cat].chance + 0.2, (cat, name, mean)
    # suite 1 is not balanced (its lists are sometimes shown sorted), but every checker scores every policy's answer
    for p in generate_tasks(360, seed=0):
        for fn in POLICIES.values():
            assert 0 <= check(p, [fn(p.turns[0])]) <= 10


def test_surface_chance_leaves_nothing_to_a_policy_and_half_to_a_right_yes():
    """Reward minus ``SurfaceChance``: every policy, and a constant in other words, nets about 0 per category;
    the right answer keeps what it earns beyond chance (0.5 on yes/no, comparison and sorting)."""
    prompts = generate_tasks(12 * 40, seed=12, suite=2)
    chance = SurfaceChance(prompts)

    def net(items, answers):
        return sum(check(p, [a]) / 10 - chance.of(p, a) for p, a in zip(items, answers)) / len(items)

    for cat in CATEGORIES:
        items = [p for p in prompts if p.category == cat]
        ruled = CATEGORY_INFO[cat].chance >= 0.3  # a rule that ignores the question passes a third or more
        for name, fn in POLICIES.items():
            ruling = chance.rates[cat][name] >= chance.floor  # a rule: nothing left; a guess keeps its few points
            assert net(items, [fn(p.turns[0]) for p in items]) <= (0.02 if ruling else chance.floor), (cat, name)
        right = net(items, [p.reference[0] for p in items])
        assert right >= (0.45 if ruled else 0.8), (cat, right)
    # below the floor nothing is taken off: a near miss is a guess, not a rule (0.25 of the points at most), so a
    # wrong answer is never worse than an empty one there (without the floor GRPO learned to answer nothing)
    sums = [p for p in prompts if p.category == "arithmetic"]
    assert all(chance.of(p, str(int(p.reference[0]) + 1)) == 0.0 for p in sums)
    assert SurfaceChance(prompts, floor=0.0).of(sums[0], str(int(sums[0].reference[0]) + 1)) > 0
    yes_no = [p for p in prompts if p.category == "yes_no"]
    for constant in ("Yes, it is.", "NO!", "yes\nbecause"):
        assert abs(net(yes_no, [constant] * len(yes_no))) <= 0.02, constant
    first = yes_no[0]
    wrong = "no" if first.reference[0] == "yes" else "yes"
    assert chance.of(first, first.reference[0]) == 0.5 and check(first, [wrong]) / 10 - chance.of(first, wrong) == -0.5
    assert chance.of(first, "") == 0.0


def test_follows_shortcut_flags_a_positional_model_and_not_a_right_one():
    prompts = generate_tasks(12 * 24, seed=0, suite=2)
    second = {p.id: POLICIES["second number"](p.turns[0]) for p in prompts if p.category == "comparison"}
    found = follows_shortcut(prompts, second)
    # "second number" is the last of two, too: one policy per category, the first of the best
    assert [(s.category, s.policy) for s in found] == [("comparison", "second number")]
    assert found[0].agreement == 1.0 and found[0].exact == 0.5
    right = {p.id: p.reference[0] for p in prompts}
    assert follows_shortcut(prompts, right) == []
    yes = {p.id: "Yes." for p in prompts if p.category == "yes_no"}
    assert [(s.category, s.policy) for s in follows_shortcut(prompts, yes)] == [("yes_no", "yes")]
    # an empty reply follows no policy, even one that has nothing to say (no number in the question)
    empty = {p.id: "" for p in prompts if p.category in ("letter_case", "reverse")}
    assert follows_shortcut(prompts, empty) == []


@pytest.mark.parametrize("answer,score", [
    ("March 17", 10), ("march 17th, 2025", 10), ("March 17.", 10), ("It is March 17", 10),
    ("March 18", 0), ("April 17", 0), ("17", 0), ("I think\nMarch 17", 3), ("March 16 or March 17", 3), ("", 0),
])
def test_date_checker(answer, score):
    assert check_date(answer, "March 17", {}) == score


def test_date_arithmetic_crosses_month_and_year_ends():
    prompts = generate_tasks(300, seed=4, suite=2, categories=["date_arithmetic"])
    crossing = [p for p in prompts if p.meta["tier"] == 3]
    assert crossing and all(p.reference[0].split()[0] not in p.turns[0] for p in crossing
                            if "December" not in p.turns[0])
    december = [p for p in crossing if "after December" in p.turns[0]]
    assert december and all(p.reference[0].startswith("January") for p in december)


def test_config_takes_the_suite_and_refuses_unknown_versions_and_categories(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: t\ntasks: {n: 24, suite: 2}\nmodels: [{name: a, engine: openai, model: m, "
                    "base_url: 'http://127.0.0.1:9/v1'}, {name: b, engine: openai, model: n, "
                    "base_url: 'http://127.0.0.1:9/v1'}]\njudge: {kind: verifier}\n")
    assert load_config_file(path, RunConfig).tasks.suite == 2
    path.write_text(path.read_text().replace("suite: 2", "suite: 3"))
    with pytest.raises(ConfigError, match="suite"):
        load_config_file(path, RunConfig)
    with pytest.raises(ValueError, match="not categories of suite 2|unknown task categories"):
        generate_tasks(5, suite=2, categories=["capitals"])
