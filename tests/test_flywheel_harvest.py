"""Harvest on hand-built records: SFT takes the lost prompts and the best winner; pairs take most/fewest wins."""

from __future__ import annotations

import asyncio

import pytest

from arena_learning.arena.battles import combine_games
from arena_learning.arena.judges import PairTask, VerifierJudge
from arena_learning.flywheel.harvest import (
    RipFilter,
    harvest_pairs,
    harvest_sft,
    per_model_counts,
    select_pairs,
    select_sft,
)
from arena_learning.records import Answer, Battle, Prompt

T, R1, R2 = "target", "ref-a", "ref-b"


def prompt(pid: str, *turns: str) -> Prompt:
    return Prompt(id=pid, turns=list(turns) or [f"question {pid}"])


def answer(pid: str, model: str, *turns: str) -> Answer:
    return Answer(prompt_id=pid, model=model, turns=list(turns))


def battle(pid: str, a: str, b: str, sa: float, sb: float, tie: float = 0.0) -> Battle:
    outcome = "tie" if abs(sa - sb) <= tie else ("model_a" if sa > sb else "model_b")
    return Battle(prompt_id=pid, model_a=a, model_b=b, outcome=outcome, score_a=sa, score_b=sb,
                  score_gap=abs(sa - sb), judge="j")


@pytest.fixture
def arena():
    """p1: target lost to both (ref-b scores higher); p2: target won; p3: tie; p4: lost to ref-a only, by 2."""
    prompts = [prompt("p1"), prompt("p2"), prompt("p3"), prompt("p4")]
    answers = [answer(p.id, m, f"{m} on {p.id}") for p in prompts for m in (T, R1, R2)]
    battles = [
        battle("p1", T, R1, 0, 7), battle("p1", R2, T, 9, 0),
        battle("p2", T, R1, 10, 0), battle("p2", R2, T, 0, 10),
        battle("p3", T, R1, 5, 5), battle("p3", R2, T, 5, 5),
        battle("p4", T, R1, 3, 5), battle("p4", R2, T, 3, 3),
    ]
    return prompts, answers, battles


def test_sft_takes_exactly_the_lost_prompts_and_the_best_winner(arena):
    prompts, answers, battles = arena
    items = harvest_sft(prompts, answers, battles, target=T, references=[R1, R2], slice_name="D1", round_index=2)
    assert [it.prompt_id for it in items] == ["p1", "p4"]
    p1, p4 = items
    assert p1.source_model == R2 and p1.score == 9 and p1.target_score == 0  # the highest-scored winner
    assert p1.messages == [{"role": "user", "content": "question p1"}, {"role": "assistant", "content": "ref-b on p1"}]
    assert p4.source_model == R1 and p4.score == 5 and p4.target_score == 3
    assert {(it.slice, it.round, it.selection) for it in items} == {("D1", 2, "pair_judge")}
    assert per_model_counts(items) == {R1: 1, R2: 1}


def test_sft_threshold_drops_small_losses(arena):
    prompts, answers, battles = arena
    items = harvest_sft(prompts, answers, battles, target=T, references=[R1, R2], threshold=2.0)
    assert [it.prompt_id for it in items] == ["p1"]  # p4 lost by exactly 2: not above the threshold


def test_sft_winner_ties_go_to_the_first_reference():
    prompts = [prompt("p")]
    answers = [answer("p", m, m) for m in (T, R1, R2)]
    battles = [battle("p", T, R1, 0, 8), battle("p", T, R2, 0, 8)]
    assert harvest_sft(prompts, answers, battles, target=T, references=[R2, R1])[0].source_model == R2
    assert harvest_sft(prompts, answers, battles, target=T, references=[R1, R2])[0].source_model == R1


def test_sft_keeps_every_turn_of_a_multi_turn_conversation():
    p = prompt("m", "first question", "follow-up")
    answers = [answer("m", T, "bad", "bad"), answer("m", R1, "good one", "good two")]
    battles = [battle("m", T, R1, 2, 9)]
    (item,) = harvest_sft([p], answers, battles, target=T, references=[R1])
    assert item.messages == [
        {"role": "user", "content": "first question"}, {"role": "assistant", "content": "good one"},
        {"role": "user", "content": "follow-up"}, {"role": "assistant", "content": "good two"},
    ]


def test_sft_pools_both_orders_of_a_pair():
    p = prompt("p")
    answers = [answer("p", T, "t"), answer("p", R1, "r")]
    # One game each way (combine mode 'both'): the reference wins one, ties the other -> a loss overall.
    battles = [battle("p", T, R1, 4, 8), battle("p", R1, T, 6, 6)]
    (item,) = harvest_sft([p], answers, battles, target=T, references=[R1])
    assert item.score == 7 and item.target_score == 5


def test_sft_from_real_verifier_battles():
    p = Prompt(id="q", turns=["What is 2 + 3?"], reference=["5"], checker="numeric", meta={})
    answers = [answer("q", T, "6"), answer("q", R1, "5"), answer("q", R2, "five")]
    judge = VerifierJudge()
    tasks = [PairTask(p, answers[0], answers[1]), PairTask(p, answers[2], answers[0])]
    games = asyncio.run(judge.judge_pairs(None, tasks))  # the verifier needs no store
    items = harvest_sft([p], answers, combine_games(games), target=T, references=[R1, R2])
    assert [(it.prompt_id, it.source_model, it.messages[-1]["content"]) for it in items] == [("q", R1, "5")]


def test_pairs_take_most_and_fewest_wins_and_drop_small_gaps():
    prompts = [prompt("a"), prompt("b"), prompt("c")]
    models = [T, R1, R2]
    answers = [answer(p.id, m, f"{m}:{p.id}") for p in prompts for m in models]
    battles = [
        # a: R1 beats both, T beats R2 -> chosen R1 (2 wins), rejected R2 (0 wins); gap 8 - 1 = 7
        battle("a", T, R1, 4, 8), battle("a", R1, R2, 8, 1), battle("a", T, R2, 4, 1),
        # b: all tie on wins (0), scores decide: T mean 6, R1 5.5, R2 5 -> gap 1 <= K=1: dropped
        battle("b", T, R1, 6, 6), battle("b", R1, R2, 5, 5), battle("b", T, R2, 6, 5, tie=1),
        # c: T wins two, R2 one, R1 none; gap T (mean 9) vs R1 (mean 2) = 7
        battle("c", T, R1, 9, 2), battle("c", R2, R1, 7, 2), battle("c", T, R2, 9, 7),
    ]
    pairs = harvest_pairs(prompts, answers, battles, models=models, k=1.0, slice_name="D2", round_index=1)
    assert [(p.prompt_id, p.chosen_model, p.rejected_model) for p in pairs] == [("a", R1, R2), ("c", T, R1)]
    a = pairs[0]
    assert a.margin == pytest.approx(7.0) and a.chosen_wins == 2 and a.rejected_wins == 0
    assert a.prompt == [{"role": "user", "content": "question a"}]
    assert a.chosen == [{"role": "assistant", "content": "ref-a:a"}]
    assert a.rejected == [{"role": "assistant", "content": "ref-b:a"}]
    assert (a.slice, a.round) == ("D2", 1)
    # With K = 0 the tie-on-wins prompt comes in, decided by mean score.
    loose = harvest_pairs(prompts, answers, battles, models=models, k=0.0)
    b = next(p for p in loose if p.prompt_id == "b")
    assert (b.chosen_model, b.rejected_model) == (T, R2) and b.margin == pytest.approx(1.0)


def test_pairs_keep_multi_turn_conversations_and_mean_scores():
    p = prompt("m", "one", "two")
    answers = [answer("m", T, "t1", "t2"), answer("m", R1, "r1", "r2")]
    battles = [battle("m", T, R1, 2.5, 9.0)]  # scores are means over turns already
    (pair,) = harvest_pairs([p], answers, battles, models=[T, R1])
    assert pair.prompt == [{"role": "user", "content": "one"}]
    assert pair.chosen == [{"role": "assistant", "content": "r1"}, {"role": "user", "content": "two"},
                           {"role": "assistant", "content": "r2"}]
    assert pair.rejected[-1] == {"role": "assistant", "content": "t2"}


def test_rip_filter_drops_low_quality_prompts():
    prompts = [prompt("x"), prompt("y")]
    answers = [answer("x", T, "a long enough rejected answer"), answer("x", R1, "right"),
               answer("y", T, "?"), answer("y", R1, "right")]
    battles = [battle("x", T, R1, 3, 10), battle("y", T, R1, 0, 10)]
    assert len(harvest_pairs(prompts, answers, battles, models=[T, R1])) == 2
    kept = harvest_pairs(prompts, answers, battles, models=[T, R1], rip=RipFilter(min_rejected_score=1.0))
    assert [p.prompt_id for p in kept] == ["x"]
    assert [p.prompt_id for p in harvest_pairs(prompts, answers, battles, models=[T, R1],
                                               rip=RipFilter(min_rejected_length=5))] == ["x"]
    assert [p.prompt_id for p in harvest_pairs(prompts, answers, battles, models=[T, R1],
                                               rip=RipFilter(max_gap=8))] == ["x"]


def test_sft_baselines_all_random_longest(arena):
    prompts, answers, battles = arena
    kw = {"target": T, "references": [R1, R2]}
    judged = select_sft("pair_judge", prompts, answers, battles, **kw)
    everything = select_sft("all", prompts, answers, battles, **kw)
    assert len(everything) == 8 and {it.selection for it in everything} == {"all"}
    rnd = select_sft("random", prompts, answers, battles, seed=3, **kw)
    assert len(rnd) == len(judged) == 2 and {it.selection for it in rnd} == {"random"}
    pool = [it.model_dump(exclude={"selection"}) for it in everything]
    assert all(it.model_dump(exclude={"selection"}) in pool for it in rnd) and rnd[0] != rnd[1]
    assert [it.model_dump() for it in rnd] == [it.model_dump() for it in select_sft("random", prompts, answers,
                                                                                   battles, seed=3, **kw)]
    # references' answers of distinct lengths: the three longest of the eight are taken, longest first
    length = {("p1", R1): 4, ("p2", R1): 11, ("p3", R1): 2, ("p4", R1): 8,
              ("p1", R2): 9, ("p2", R2): 1, ("p3", R2): 6, ("p4", R2): 12}
    sized = [a if a.model == T else answer(a.prompt_id, a.model, "x" * length[a.prompt_id, a.model]) for a in answers]
    longest = select_sft("longest", prompts, sized, battles, size=3, **kw)
    assert [(it.prompt_id, it.source_model) for it in longest] == [("p4", R2), ("p2", R1), ("p1", R2)]
    assert [it.messages[-1]["content"] for it in longest] == ["x" * 12, "x" * 11, "x" * 9]
    assert {it.selection for it in longest} == {"longest"}
    with pytest.raises(ValueError, match="unknown SFT selection"):
        select_sft("best", prompts, answers, battles, **kw)


def test_pair_baselines_all_random_longest():
    prompts = [prompt(f"p{i}") for i in range(6)]
    # (target's length, ref-a's length): gaps 7, 28, 0, 19, 4, 11, the longer side sometimes one, sometimes the other
    lengths = [(10, 3), (2, 30), (7, 7), (20, 1), (5, 9), (1, 12)]
    answers = [answer(p.id, m, "x" * n) for p, ns in zip(prompts, lengths) for m, n in zip((T, R1), ns)]
    battles = [battle(p.id, T, R1, i % 3, 10 - i) for i, p in enumerate(prompts)]
    # ref-a wins every prompt, by 10, 8, 6, 7, 5, 3: the judge's k=5 keeps p0-p3, "all" keeps every prompt
    judged = select_pairs("pair_judge", prompts, answers, battles, models=[T, R1], k=5.0)
    assert [p.prompt_id for p in judged] == ["p0", "p1", "p2", "p3"]
    everything = select_pairs("all", prompts, answers, battles, models=[T, R1], k=5.0)
    assert [(p.prompt_id, p.chosen_model, p.selection) for p in everything] == [(f"p{i}", R1, "all") for i in range(6)]
    # random: as many as the judge kept, distinct, drawn from the whole pool, the same for the same seed
    rnd = select_pairs("random", prompts, answers, battles, models=[T, R1], k=5.0, seed=1)
    assert len({p.prompt_id for p in rnd}) == len(rnd) == 4 and {p.selection for p in rnd} == {"random"}
    pool = {p.prompt_id: p.model_dump(exclude={"selection"}) for p in everything}
    assert all(p.model_dump(exclude={"selection"}) == pool[p.prompt_id] for p in rnd)
    assert rnd == select_pairs("random", prompts, answers, battles, models=[T, R1], k=5.0, seed=1)
    # the two largest length gaps (p1: 28, p3: 19), each with its longer answer chosen and shorter rejected
    longest = select_pairs("longest", prompts, answers, battles, models=[T, R1], size=2)
    assert sorted((p.prompt_id, p.chosen_model, p.rejected_model) for p in longest) == [("p1", R1, T), ("p3", T, R1)]
    assert sorted((len(p.chosen[0]["content"]), len(p.rejected[0]["content"])) for p in longest) == [(20, 1), (30, 2)]
    assert {p.selection for p in longest} == {"longest"}
    # a tie in length (p2) is never a pair, however many are asked for
    assert sorted(p.prompt_id for p in select_pairs("longest", prompts, answers, battles, models=[T, R1],
                                                     size=6)) == ["p0", "p1", "p3", "p4", "p5"]
