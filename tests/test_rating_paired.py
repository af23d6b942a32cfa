"""Paired comparisons: the rating difference's interval from shared prompt resamples, on battles with known truth."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from arena_learning.errors import ArenaError
from arena_learning.rating.bt import RateOptions, rate
from arena_learning.rating.counts import BattleTable
from arena_learning.rating.paired import exact_answers, exact_count, head_to_head, model_diff, paired_delta
from arena_learning.records import Answer, Battle, ExactAnswers, Prompt


def verifier_battles(right: dict[str, set[int]], n_prompts: int) -> list[Battle]:
    """Every pair of models on every prompt, judged as the verifier does: right beats wrong, else a tie."""
    out = []
    for p in range(n_prompts):
        for a, b in itertools.combinations(right, 2):
            ra, rb = p in right[a], p in right[b]
            outcome = "tie" if ra == rb else ("model_a" if ra else "model_b")
            out.append(Battle(prompt_id=f"p{p}", model_a=a, model_b=b, outcome=outcome))
    return out


N = 300


def world(seed: int = 0) -> dict[str, set[int]]:
    """Two references and a student A; B is A plus 8 prompts (strictly better on shared prompts); A2 is a copy of A;
    C has A's strength on other prompts."""
    rng = np.random.default_rng(seed)
    easy = rng.random(N)
    a = {p for p in range(N) if easy[p] < 0.45}
    extra = set(rng.choice(sorted(set(range(N)) - a), size=8, replace=False).tolist())
    c = set(rng.choice(N, size=len(a), replace=False).tolist())
    return {"ref1": {p for p in range(N) if easy[p] < 0.5}, "ref2": {p for p in range(N) if easy[p] < 0.4},
            "A": a, "B": a | extra, "A2": set(a), "C": c}


def fit(battles, **kw):
    return rate(BattleTable.from_battles(battles), RateOptions(bootstrap=kw.pop("bootstrap", 400), **kw))


def test_a_model_strictly_better_on_shared_prompts_has_a_paired_interval_above_zero_where_separate_ones_overlap():
    battles = verifier_battles(world(), N)
    f = fit(battles, seed=3, anchor="ref1")  # both rated against a reference, as the flywheel's models are
    d = paired_delta(f, "B", "A")
    ia, ib = f.models.index("A"), f.models.index("B")
    # the separate 95% intervals overlap: by them, B is not shown better than A
    assert f.ci_low[ib] < f.ci_high[ia]
    assert d.rating > 0 and d.ci_low is not None and d.ci_low > 0 and d.ci_high > d.ci_low
    assert d.rating == pytest.approx(f.ratings[ib] - f.ratings[ia])
    assert d.p_better == 1.0 and d.rounds == 400
    # the other way round is the mirror image
    back = paired_delta(f, "A", "B")
    assert (back.rating, back.ci_low, back.ci_high) == pytest.approx((-d.rating, -d.ci_high, -d.ci_low))


def test_identical_models_give_an_interval_at_zero_and_equal_strength_one_around_zero():
    f = fit(verifier_battles(world(), N), seed=3)
    same = paired_delta(f, "A2", "A")
    assert same.rating == pytest.approx(0, abs=1e-6)
    assert same.ci_low == pytest.approx(0, abs=1e-6) and same.ci_high == pytest.approx(0, abs=1e-6)
    other = paired_delta(f, "C", "A")  # as many right answers, on other prompts
    assert other.ci_low < 0 < other.ci_high
    assert abs(other.rating) < 0.5 * (other.ci_high - other.ci_low)


def test_the_paired_interval_is_the_same_for_the_same_seed_and_moves_with_another():
    battles = verifier_battles(world(), N)
    one, two, other = (paired_delta(fit(battles, seed=s), "B", "A") for s in (7, 7, 8))
    assert one == two
    assert (other.ci_low, other.ci_high) != (one.ci_low, one.ci_high) and other.rating == one.rating


def test_without_bootstrap_there_is_no_interval_and_unknown_models_are_refused():
    battles = verifier_battles(world(), N)
    d = paired_delta(fit(battles, bootstrap=0), "B", "A")
    assert d.rating > 0 and d.ci_low is None and d.p_better is None
    with pytest.raises(ArenaError, match="'Z' has no battles here; the models are: A, A2, B, C, ref1, ref2"):
        paired_delta(fit(battles, bootstrap=0), "Z", "A")
    with pytest.raises(ArenaError, match="not 'A' with itself"):
        paired_delta(fit(battles, bootstrap=0), "A", "A")


def test_head_to_head_and_exact_answers_gained_and_lost_per_category():
    w = world()
    battles = verifier_battles(w, N)
    h = head_to_head(battles, "B", "A")
    assert (h.wins, h.losses, h.ties, h.shared_prompts) == (8, 0, N - 8, N)
    prompts = [Prompt(id=f"p{p}", turns=[f"What is {p} + 1?"], category="odd" if p % 2 else "even",
                      reference=[str(p + 1)], checker="numeric") for p in range(N)]
    answers = [Answer(prompt_id=f"p{p}", model=m, turns=[str(p + 1) if p in right else "no idea"])
               for m, right in w.items() for p in range(N)]
    correct = exact_answers(prompts, answers)
    assert sum(correct["B"].values()) == len(w["B"])
    cats = {p.id: p.category for p in prompts}
    e = exact_count(correct, cats, "C", "A")
    assert e.n == len(w["C"]) and e.of == N
    assert e.gained == len(w["C"] - w["A"]) and e.lost == len(w["A"] - w["C"])
    odd = e.per_category["odd"]
    assert odd.gained == len({p for p in w["C"] - w["A"] if p % 2}) and odd.n == len({p for p in w["C"] if p % 2})
    assert e.per_category["even"].lost + odd.lost == e.lost
    alone = exact_count(correct, cats, "A")
    assert alone.gained is None and alone.per_category["odd"].lost is None
    diff = model_diff(fit(battles, seed=3), battles, "B", "A", prompts, answers)
    out = diff.as_dict()
    assert out["exact"]["gained"] == 8 and out["exact"]["lost"] == 0 and out["exact_other"]["gained"] == 0
    # one record: the count the flywheel state keeps (vs set) is the one --diff prints (without vs)
    assert isinstance(diff.exact, ExactAnswers) and diff.exact.vs == "A" and alone.vs is None
    assert list(out["exact"]) == ["n", "of", "gained", "lost", "per_category"]
    b_odd = diff.exact.per_category["odd"]
    assert out["exact"]["per_category"]["odd"] == {"n": b_odd.n, "of": b_odd.of, "gained": b_odd.gained,
                                                   "lost": b_odd.lost}
    assert out["delta"]["ci_low"] > 0 and out["head_to_head"]["wins"] == 8
    assert out["settings"]["resample"] == "prompt"
    # open prompts (no checker reference) have no exact answers to count
    assert exact_count(exact_answers([p.model_copy(update={"checker": None}) for p in prompts], answers), cats,
                       "A") is None
