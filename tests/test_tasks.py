from __future__ import annotations

import pytest

from arena_learning.records import Prompt
from arena_learning.tasks import CATEGORIES, check, check_exact, check_list, check_numeric, check_text, generate_tasks


def test_suite_covers_at_least_eight_categories_evenly():
    prompts = generate_tasks(90, seed=3)
    cats = [p.category for p in prompts]
    assert len(CATEGORIES) >= 8
    assert set(cats) == set(CATEGORIES)
    assert max(cats.count(c) for c in CATEGORIES) - min(cats.count(c) for c in CATEGORIES) <= 1


def test_generation_is_seeded_distinct_and_stable():
    a, b = generate_tasks(60, seed=7), generate_tasks(60, seed=7)
    assert [p.model_dump() for p in a] == [p.model_dump() for p in b]
    assert len({p.turns[0] for p in a}) == 60
    assert len({p.id for p in a}) == 60
    assert [p.turns for p in generate_tasks(60, seed=8)] != [p.turns for p in a]
    # An id is the question's: the same question keeps its id in any set.
    c = generate_tasks(120, seed=7)
    ids_c = {p.turns[0]: p.id for p in c}
    assert all(ids_c[p.turns[0]] == p.id for p in a if p.turns[0] in ids_c)


def test_every_generated_reference_scores_ten_with_its_own_checker():
    for p in generate_tasks(180, seed=1):
        assert check(p, [p.reference[0]]) == 10.0, p
        assert check(p, ["I do not know"]) == 0.0, p


def test_unknown_category_is_an_error():
    with pytest.raises(ValueError, match="unknown task categories"):
        generate_tasks(5, categories=["astrology"])


@pytest.mark.parametrize(
    "answer,score",
    [("42", 10), (" 42.", 10), ("The answer is 42", 10), ("42,000", 0), ("41", 0), ("It is 40 or 42", 3), ("", 0)],
)
def test_numeric_checker(answer, score):
    assert check_numeric(answer, "42", {}) == score


def test_numeric_checker_gives_partial_credit_for_close_arithmetic():
    meta = {"closeness": True}
    assert check_numeric("1001", "1000", meta) == 7
    assert check_numeric("1050", "1000", meta) == 3
    assert check_numeric("2000", "1000", meta) == 0
    assert check_numeric("12,345", "12345", meta) == 10


@pytest.mark.parametrize(
    "answer,score", [("Paris", 10), ("paris.", 10), ("The answer is Paris", 10), ("It is in Paris, France", 6),
                     ("Lyon", 0), ("Parisian", 0)],
)
def test_text_checker(answer, score):
    assert check_text(answer, "Paris", {}) == score


@pytest.mark.parametrize("answer,score", [("RIVER", 10), ("'RIVER'.", 10), ("river", 5), ("The word is RIVER", 4),
                                          ("RIVR", 0)])
def test_exact_checker(answer, score):
    assert check_exact(answer, "RIVER", {}) == score


@pytest.mark.parametrize(
    "answer,score", [("3, 4, 41", 10), ("3 4 41", 10), ("3, 41, 4", pytest.approx(8 / 3, abs=0.01)),
                     ("41, 4, 3", 0), ("3, 4", 0), ("1, 2, 3", 0)],
)
def test_list_checker_credits_positions_only_for_the_same_items(answer, score):
    # the list in the opposite order ("41, 4, 3") is a direction-blind sort: no credit for its middle
    assert check_list(answer, "3,4,41", {}) == score


@pytest.mark.parametrize("question,reference,checker,answer,score", [
    # the question given back earns no partial credit, whatever the checker would pay
    ("Write the word 'river' in uppercase letters.", "RIVER", "exact", "river", 0),
    ("Write the word 'river' in uppercase letters.", "RIVER", "exact", "'River'.", 0),
    ("Write the word 'river' in uppercase letters.", "RIVER", "exact", "Write the word 'river' in uppercase", 0),
    ("Write the word 'RiVeR' in lowercase letters.", "river", "word", "RiVeR", 0),
    ("Write the word 'river' in uppercase letters.", "RIVER", "exact", "RIVER", 10),
    ("Spell the word 'cat' backwards.", "tac", "exact", "TAC", 5),          # right but for case, not an echo
    # an operand is no near miss; the right number beside the other in a comparison is a hedge
    ("What is 870 - 209?", "661", "numeric", "870", 0),
    ("What is 870 - 209?", "661", "numeric", "209", 0),
    ("What is 870 - 209?", "661", "numeric", "720", 3),                     # within 10%, not from the question
    ("What is 870 - 209?", "661", "numeric", "870 - 209 = 661", 3),          # right but not first
    ("Which number is larger, 412 or 487?", "487", "numeric", "412 or 487", 0),
    ("Which number is larger, 412 or 487?", "487", "numeric", "412, 487", 0),
    ("Which number is larger, 412 or 487?", "487", "numeric", "487", 10),
    # naming every option is no answer
    ("Is 7 an odd number?", "yes", "text", "yes or no", 0),
    ("Is 7 an odd number?", "yes", "text", "Yes, it is", 6),
    # a sort earns only for the positions it puts right that the shown order had wrong
    ("Sort these numbers from smallest to largest: 41, 3, 4.", "3,4,41", "list", "41, 3, 4", 0),
    ("Sort these numbers from smallest to largest: 41, 3, 4.", "3,4,41", "list", "3, 41, 4", 8 / 3),
    ("Sort these numbers from smallest to largest: 3, 41, 4.", "3,4,41", "list", "4, 3, 41", 0),
    ("Sort these numbers from smallest to largest: 3, 41, 4.", "3,4,41", "list", "41, 4, 3", 0),
    ("Sort these numbers from largest to smallest: 4, 41, 3, 9.", "41,9,4,3", "list", "41, 4, 9, 3", 4),
    ("Sort these numbers from smallest to largest: 3, 4, 41.", "3,4,41", "list", "3, 41, 4", 0),  # shown sorted
])
def test_partial_credit_is_only_for_what_an_answer_adds_to_the_question(question, reference, checker, answer, score):
    p = Prompt(id="x", turns=[question], reference=[reference], checker=checker, meta={"closeness": True})
    assert check(p, [answer]) == pytest.approx(score, abs=0.01)


def test_multi_turn_prompt_scores_the_mean_of_its_turns():
    p = Prompt(id="x", turns=["What is 2 + 2?", "And 3 + 3?"], reference=["4", "6"], checker="numeric")
    assert check(p, ["4", "7"]) == 5.0
    assert check(p, ["4"]) == 5.0  # a missing turn scores 0


def test_prompt_without_reference_cannot_be_verified():
    with pytest.raises(ValueError, match="no reference answer"):
        check(Prompt(id="open", turns=["Write a poem"]), ["..."])


def test_the_demo_test_set_holds_none_of_its_own_few_shot_examples():
    from pathlib import Path

    from arena_learning import pipeline
    from arena_learning.config import RunConfig, load_config_file

    examples = Path(__file__).resolve().parents[1] / "examples"
    for name, n_shots in (("quickstart.yaml", 12), ("formats.yaml", 8)):
        cfg = load_config_file(examples / name, RunConfig)
        shots = pipeline.few_shot_questions(pipeline.run_models(cfg))
        assert len(shots) == n_shots
        plain = generate_tasks(cfg.tasks.n, seed=cfg.tasks.seed, suite=cfg.tasks.suite)
        if name == "formats.yaml":
            assert {p.turns[0] for p in plain} & shots  # the seed does generate some of them
        prompts = generate_tasks(cfg.tasks.n, seed=cfg.tasks.seed, exclude=shots, suite=cfg.tasks.suite)
        assert len(prompts) == cfg.tasks.n and not {p.turns[0] for p in prompts} & shots


def test_asking_the_suite_for_more_than_it_has_is_a_clear_cli_error(tmp_path):
    import subprocess

    from .conftest import ARENA, REPO

    proc = subprocess.run([*ARENA, "answer", str(REPO / "examples" / "formats.yaml"), "-w", str(tmp_path / "ws"),
                           "--set", "tasks.n=5000"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "set tasks.n lower" in proc.stderr and "Traceback" not in proc.stderr
