"""The target's own samples as candidates (harvest.samples) and data balanced against shortcuts (harvest.balance)."""

from __future__ import annotations

import json

import pytest

from arena_learning.config import ModelSpec
from arena_learning.flywheel.harvest import (
    PreferenceItem,
    SFTItem,
    balance_items,
    harvest_sft,
    own_right_sft,
    per_model_counts,
    shortcut_key,
    with_own_right,
)
from arena_learning.flywheel.settings import HarvestConfig, SampleSettings, SFTSettings
from arena_learning.records import Answer, Battle
from arena_learning.tasks import generate_tasks


def sft(p, text: str, model: str = "ref") -> SFTItem:
    return SFTItem(messages=[{"role": "user", "content": p.turns[0]}, {"role": "assistant", "content": text}],
                   prompt_id=p.id, source_model=model)


def test_samples_are_seeded_variants_of_the_model_that_battles():
    spec = ModelSpec(name="student-r1-sft", engine="transformers", model="bundled", mode="completion",
                     params={"max_tokens": 8, "temperature": 0.0, "stop": ["\n"]})
    out = SampleSettings(k=3, temperature=0.8, seed=5).variants(spec)
    assert [m.name for m in out] == ["student-r1-sft-sample0", "student-r1-sft-sample1", "student-r1-sft-sample2"]
    assert [(m.params.temperature, m.params.seed) for m in out] == [(0.8, 5), (0.8, 6), (0.8, 7)]
    assert all(m.params.max_tokens == 8 and m.params.stop == ["\n"] and m.model == "bundled" for m in out)
    assert spec.params.temperature == 0.0            # the target itself is untouched


def test_the_first_shots_samples_see_the_few_shot_examples():
    spec = ModelSpec(name="student", engine="transformers", model="bundled", mode="completion",
                     params={"max_tokens": 8, "temperature": 0.0})
    shots = [("What is 1 + 2?", "3"), ("Spell 'ab' backwards.", "ba")]
    out = SampleSettings(k=4, temperature=0.8, few_shot=shots, shots=2).variants(spec)
    assert [len(m.prompt_format.few_shot) for m in out] == [2, 2, 0, 0]
    assert [m.params.seed for m in out] == [0, 1, 2, 3]
    assert all(len(m.prompt_format.few_shot) == 2 for m in SampleSettings(k=3, few_shot=shots).variants(spec))
    assert spec.prompt_format.few_shot == []                  # the target itself is untouched
    with pytest.raises(ValueError, match="needs few_shot"):
        SampleSettings(k=2, shots=1)
    with pytest.raises(ValueError, match="more than k"):
        SampleSettings(k=2, few_shot=shots, shots=3)
    # unset, the new fields stay out of the dump (and so of old workspaces' fingerprints)
    assert set(SampleSettings(k=2).model_dump()) == {"k", "temperature", "seed"}


def test_the_samples_few_shot_questions_stay_out_of_every_slice():
    from arena_learning.flywheel.settings import FlywheelConfig
    from arena_learning.flywheel.slices import slice_prompts

    taken = generate_tasks(6, seed=102 * 1000, categories=["arithmetic"], suite=2)  # what D1 would hold
    cfg = FlywheelConfig.model_validate({
        "tasks": {"n": 12, "seed": 0, "suite": 2},
        "target": {"name": "student", "engine": "transformers", "model": "bundled"},
        "references": [{"name": "ref", "engine": "llamacpp", "model": "bundled"}],
        "pool": {"D1": {"n": 6, "seed": 102, "categories": ["arithmetic"]}},
        "rounds": [{"stages": [{"kind": "sft", "slice": "D1"}]}],
        "harvest": {"samples": {"k": 2, "few_shot": [[taken[0].turns[0], taken[0].reference[0]]]}}})
    got = slice_prompts(cfg, [], None)["D1"][0]
    assert taken[0].turns[0] not in {p.turns[0] for p in got}
    assert len(got) == 6
    plain = cfg.model_copy(update={"harvest": HarvestConfig(samples={"k": 2})})
    assert taken[0].turns[0] in {p.turns[0] for p in slice_prompts(plain, [], None)["D1"][0]}  # the control


def test_new_harvest_options_leave_old_fingerprints_alone():
    # a workspace made before these options existed must not redo its stages
    h = HarvestConfig()
    assert set(h.model_dump(exclude=h.fingerprint_exclude())) == {"sft_threshold", "k", "rm_k", "rip", "replay",
                                                                  "seed"}
    on = HarvestConfig(samples={"k": 2}, balance=True, sft_min_score=10)
    assert {"samples", "balance", "sft_min_score"} <= set(on.model_dump(exclude=on.fingerprint_exclude()))
    # nor does training.sft.start while it is the default (the stage fingerprint dumps the settings)
    assert "start" not in SFTSettings().model_dump(mode="json")
    assert SFTSettings(start="base").model_dump(mode="json")["start"] == "base"
    with pytest.raises(ValueError):
        SFTSettings(start="scratch")


@pytest.mark.parametrize("kind", ["sft", "dpo", "rm", "rl"])
def test_every_trainer_refuses_a_learning_rate_of_zero_or_below(kind):
    from arena_learning.flywheel.settings import TrainingConfig

    for bad in (0.0, -1e-5):
        with pytest.raises(ValueError, match="greater than 0"):
            TrainingConfig.model_validate({kind: {"learning_rate": bad}})


def test_sft_can_take_the_targets_own_winning_sample():
    p = generate_tasks(1, suite=2, categories=["arithmetic"])[0]
    answers = [Answer(prompt_id=p.id, model=m, turns=[t]) for m, t in
               [("student", "1"), ("ref", "2"), ("student-sample0", p.reference[0]), ("student-sample1", "3")]]
    battles = [Battle(prompt_id=p.id, model_a="student", model_b=m, outcome="model_b", score_a=0, score_b=s,
                      score_gap=s, judge="verifier") for m, s in [("ref", 3.0), ("student-sample0", 10.0)]]
    battles.append(Battle(prompt_id=p.id, model_a="student", model_b="student-sample1", outcome="tie", score_a=0,
                          score_b=0, score_gap=0, judge="verifier"))
    got = harvest_sft([p], answers, battles, target="student", references=["ref", "student-sample0",
                                                                            "student-sample1"])
    assert [(it.source_model, it.messages[-1]["content"]) for it in got] == [("student-sample0", p.reference[0])]
    assert per_model_counts(got) == {"student-sample0": 1}


def test_a_win_on_partial_credit_supplies_no_example_under_a_min_score():
    # the verifier gives 3 to a sum within 10% and 5 to a word right but for its case: such an answer beats
    # a target that scored 0, but training on it teaches a wrong answer
    p, q = generate_tasks(2, suite=2, categories=["arithmetic"])
    wrong = str(int(p.reference[0]) + 1)
    answers = [Answer(prompt_id=x.id, model=m, turns=[t]) for x in (p, q) for m, t in
               [("student", "0"), ("ref", wrong if x is p else x.reference[0])]]
    battles = [Battle(prompt_id=x.id, model_a="student", model_b="ref", outcome="model_b", score_a=0, score_b=s,
                      score_gap=s, judge="verifier") for x, s in [(p, 3.0), (q, 10.0)]]
    loose = harvest_sft([p, q], answers, battles, target="student", references=["ref"])
    assert [it.prompt_id for it in loose] == [p.id, q.id]
    strict = harvest_sft([p, q], answers, battles, target="student", references=["ref"], min_score=10)
    assert [(it.prompt_id, it.messages[-1]["content"]) for it in strict] == [(q.id, q.reference[0])]


def test_balance_cuts_a_positional_majority_to_the_minority():
    prompts = generate_tasks(60, suite=2, categories=["comparison"])     # balanced: the answer first in 30
    first = [p for p in prompts if shortcut_key(p, p.reference[0]) == ("first number",)]
    second = [p for p in prompts if shortcut_key(p, p.reference[0]) == ("second number",)]
    assert len(first) == len(second) == 30
    # the target lost mostly where the answer is second: 19 of 30 harvested items say "the second number"
    items = [sft(p, p.reference[0]) for p in second[:19] + first[:11]]
    out = balance_items(items, prompts, seed=0)
    keys = [shortcut_key(next(p for p in prompts if p.id == it.prompt_id), it.messages[-1]["content"]) for it in out]
    assert keys.count(("first number",)) == keys.count(("second number",)) == 11
    assert balance_items(items, prompts, seed=0) == out                  # seeded
    assert [it.prompt_id for it in out] == [it.prompt_id for it in items if it in out]   # order kept


def test_balance_drops_a_one_sided_category_and_keeps_what_no_rule_fits():
    yn = generate_tasks(20, suite=2, categories=["yes_no"])
    arith = generate_tasks(10, suite=2, categories=["arithmetic"])
    yes_only = [sft(p, "Yes") for p in yn if p.reference[0] == "yes"]
    right = [sft(p, p.reference[0]) for p in arith]
    echo = [sft(arith[0], arith[0].turns[0].split()[2])]                # "What is A + B?" answered A
    out = balance_items([*yes_only, *right, *echo], [*yn, *arith])
    assert out == right                          # all-yes data teaches "yes"; an echoed operand teaches echoing
    pairs = [PreferenceItem(prompt=[{"role": "user", "content": p.turns[0]}],
                            chosen=[{"role": "assistant", "content": p.reference[0]}],
                            rejected=[{"role": "assistant", "content": "maybe"}], prompt_id=p.id) for p in yn]
    kept = balance_items(pairs, yn)
    assert len(kept) == 20 and sum(it.chosen[0]["content"] == "yes" for it in kept) == 10


def test_a_constant_targets_losses_are_balanced_with_its_own_right_answers():
    # A target that says "yes" to everything loses exactly on the "no" items: what it lost is one-sided by
    # construction, so balance alone drops it all and the target never hears "no". With fill, its own right
    # "yes" answers make up the other side: as many "yes" as "no", each the item's true answer.
    yn = generate_tasks(24, suite=2, categories=["yes_no"])
    arith = generate_tasks(6, suite=2, categories=["arithmetic"])
    answers = [Answer(prompt_id=p.id, model=m, turns=[t]) for p in [*yn, *arith] for m, t in
               [("student", "yes" if p in yn else "0"), ("ref", p.reference[0])]]

    def score(p, text):
        return 10.0 if text == p.reference[0] else 0.0

    battles = [Battle(prompt_id=p.id, model_a="student", model_b="ref", judge="verifier",
                      score_a=score(p, a), score_b=10.0, score_gap=10.0 - score(p, a),
                      outcome="tie" if score(p, a) == 10.0 else "model_b")
               for p, a in [(p, "yes" if p in yn else "0") for p in [*yn, *arith]]]
    lost = harvest_sft([*yn, *arith], answers, battles, target="student", references=["ref"], min_score=10)
    assert {it.messages[-1]["content"] for it in lost if it.prompt_id in {p.id for p in yn}} == {"no"}
    assert len(balance_items(lost, [*yn, *arith])) == 6                 # the 12 "no" items all dropped
    own = own_right_sft([*yn, *arith], answers, battles, target="student", min_score=10)
    assert {it.prompt_id for it in own} == {p.id for p in yn if p.reference[0] == "yes"}
    assert {(it.source_model, it.selection, it.score) for it in own} == {("student", "balance_fill", 10.0)}
    out = balance_items(lost, [*yn, *arith], seed=0, fill=own)
    said = [it.messages[-1]["content"] for it in out if it.prompt_id in {p.id for p in yn}]
    assert said.count("yes") == said.count("no") == 12
    assert out[:len(lost)] == lost and balance_items(lost, [*yn, *arith], seed=0, fill=own) == out
    # fillers make up a short side up to what was lost, never more; a category lost on nowhere takes none
    few = [it for it in lost if it.messages[-1]["content"] != "no"] + [it for it in lost
                                                                       if it.messages[-1]["content"] == "no"][:3]
    said = [it.messages[-1]["content"] for it in balance_items(few, [*yn, *arith], fill=own)]
    assert said.count("yes") == said.count("no") == 3
    assert balance_items(lost[-6:], [*yn, *arith], fill=own) == lost[-6:]   # arithmetic only: no "yes" added
    with pytest.raises(ValueError, match="balance_fill"):
        HarvestConfig(balance_fill=True, balance=True)                     # which score is right?
    assert "balance_fill" in HarvestConfig(balance=True).fingerprint_exclude()  # off: old fingerprints stay


def test_own_right_adds_the_targets_right_answers_beside_what_it_lost():
    # ReST-EM keeps every correct sample: the target's right greedy answers are examples too, each prompt once
    # (a lost prompt keeps the winner's answer), and balance still cuts a constant's one-sided side.
    yn = generate_tasks(24, suite=2, categories=["yes_no"])
    arith = generate_tasks(6, suite=2, categories=["arithmetic"])
    said = {p.id: ("yes" if p in yn else p.reference[0] if i % 2 else "0") for i, p in enumerate([*yn, *arith])}
    answers = [Answer(prompt_id=p.id, model=m, turns=[t]) for p in [*yn, *arith]
               for m, t in [("student", said[p.id]), ("ref", p.reference[0])]]
    right_of = {p.id: 10.0 if said[p.id] == p.reference[0] else 0.0 for p in [*yn, *arith]}
    battles = [Battle(prompt_id=p.id, model_a="student", model_b="ref", judge="verifier", score_a=right_of[p.id],
                      score_b=10.0, score_gap=10.0 - right_of[p.id],
                      outcome="tie" if right_of[p.id] == 10.0 else "model_b") for p in [*yn, *arith]]
    lost = harvest_sft([*yn, *arith], answers, battles, target="student", references=["ref"], min_score=10)
    right = own_right_sft([*yn, *arith], answers, battles, target="student", min_score=10, selection="own_right")
    out = with_own_right(lost, right)
    assert out[:len(lost)] == lost and len({it.prompt_id for it in out}) == len(out) == 30
    own = out[len(lost):]
    assert {(it.source_model, it.selection) for it in own} == {("student", "own_right")}
    assert all(it.messages[-1]["content"] == next(p for p in [*yn, *arith] if p.id == it.prompt_id).reference[0]
               for it in out)                                            # every example the item's true answer
    assert sum(p in arith for p in [*yn, *arith] if p.id in {it.prompt_id for it in own}) == 3
    balanced = balance_items(out, [*yn, *arith])
    told = [it.messages[-1]["content"] for it in balanced if it.prompt_id in {p.id for p in yn}]
    assert told.count("yes") == told.count("no") == 12
    with pytest.raises(ValueError, match="sft_min_score"):
        HarvestConfig(own_right=True)
    with pytest.raises(ValueError, match="one of them"):
        HarvestConfig(own_right=True, balance=True, balance_fill=True, sft_min_score=10)
    assert "own_right" in HarvestConfig().fingerprint_exclude()             # off: old fingerprints stay
    assert "own_right" not in HarvestConfig(own_right=True, sft_min_score=10).fingerprint_exclude()


@pytest.mark.slow
def test_a_flywheel_with_samples_plans_runs_and_resumes_them_through_the_ledger(tmp_path):
    """Suite 2, harvest.samples k=2, balance: the plan counts the samples' calls, the run makes exactly those,
    the samples' answers are stored (seeded: a second sample differs from the first where it can), and a rerun
    asks nothing."""
    from arena_learning.config import validate_config
    from arena_learning.flywheel.plan import plan_flywheel
    from arena_learning.flywheel.rounds import run_flywheel
    from arena_learning.flywheel.settings import FlywheelConfig
    from arena_learning.flywheel_state import load_state, state_path
    from arena_learning.store import Store

    from .test_plan import FLYWHEEL

    data = json.loads(json.dumps(FLYWHEEL))
    data["tasks"] = {"n": 6, "seed": 0, "suite": 2}
    data["pool"] = {"D0": {"n": 6, "seed": 101}}
    # selection all: the round has data whatever the battles say, so its model is trained and rated as planned
    data["rounds"] = [{"stages": [{"kind": "sft", "slice": "D0", "selection": "all"}]}]
    data["harvest"] = {"samples": {"k": 2, "temperature": 1.0, "seed": 3}, "balance": True}
    cfg = validate_config(data, FlywheelConfig, "test")
    planned: dict[str, int] = {}
    for x in plan_flywheel(cfg, None).lines:
        planned[x.model] = planned.get(x.model, 0) + x.to_send
    planned = {m: n for m, n in planned.items() if n}
    assert planned["student-base-sample0"] == planned["student-base-sample1"] == 6
    with Store(tmp_path / "ws") as store:
        run_flywheel(cfg, store, show_progress=False)
        made = dict(store.db.execute("SELECT requested_by, COUNT(*) FROM calls GROUP BY requested_by").fetchall())
        assert made == planned
        samples = [store.get_answers(f"student-base-sample{i}", "flywheel/D0") for i in (0, 1)]
        assert all(len(s) == 6 for s in samples)
        assert [a.turns for a in samples[0]] != [a.turns for a in samples[1]]
        # a rerun asks nothing again but the calls that failed (an empty sampled completion is recorded as a failed
        # call by the transformers engine, and retried on the next run)
        failed = dict(store.db.execute("SELECT requested_by, COUNT(*) FROM calls WHERE status = 'error' "
                                       "GROUP BY requested_by").fetchall())
        again = {x.model: x.to_send for x in plan_flywheel(cfg, store).lines if x.to_send}
        assert again == failed
    state = load_state(state_path(tmp_path / "ws"))
    rec = next(iter(state.stages.values()))
    # the stage trained on data, every example from a reference or a sample (an empty record would pass a subset)
    assert rec.examples > 0 and sum(rec.by_model.values()) == rec.examples
    assert set(rec.by_model) <= {"ref-2shot", "student-base-sample0", "student-base-sample1"}


def test_the_flywheels_evidence_names_a_model_that_follows_a_shortcut():
    from arena_learning.flywheel.evidence import gather
    from arena_learning.rating.bt import RateOptions
    from arena_learning.tasks import check
    from arena_learning.tasks.shortcuts import POLICIES

    prompts = generate_tasks(48, suite=2)
    said = {"right": {p.id: p.reference[0] for p in prompts},
            "pos": {p.id: (POLICIES["second number"](p.turns[0]) if p.category == "comparison" else p.reference[0])
                    for p in prompts}}
    answers = [Answer(prompt_id=pid, model=m, turns=[t]) for m, by in said.items() for pid, t in by.items()]
    battles = []
    for p in prompts:
        a, b = (check(p, [said[m][p.id]]) for m in ("right", "pos"))
        battles.append(Battle(prompt_id=p.id, model_a="right", model_b="pos", score_a=a, score_b=b,
                              score_gap=abs(a - b), judge="verifier",
                              outcome="tie" if a == b else "model_a" if a > b else "model_b"))
    ev = gather(battles, answers, prompts, RateOptions(bootstrap=0))
    assert ev.measured("right")["shortcuts"] == []
    assert [s.split(" (")[0] for s in ev.measured("pos")["shortcuts"]] == ["comparison: second number"]


def test_the_report_and_the_terminal_show_the_shortcuts_a_model_follows(capsys):
    from arena_learning.cli.flywheel import print_evidence
    from arena_learning.flywheel.rounds import FlywheelReport
    from arena_learning.flywheel_state import FlywheelState, RatedModel, RoundRow, RoundTable
    from arena_learning.report.html import _flywheel_evidence

    line = "comparison: second number (agrees on 100%, exact 50%, the rule's 50%)"
    row = RoundRow(round=0, model="student-r0-<sft>", rating=1000.0, mean_chars=3.0, shortcuts=[line])
    base = RatedModel(model="student-base", rating=990.0, mean_chars=4.0, shortcuts=[])
    html = _flywheel_evidence(FlywheelState(last_report=RoundTable(rounds=[row], base=base)))
    assert "<h3>Shortcuts</h3>" in html and "student-r0-&lt;sft&gt;" in html and "comparison: second number" in html
    print_evidence(FlywheelReport(rounds=[row], base=base))
    out = capsys.readouterr().out
    assert "shortcut round 0 student-r0-<sft>: comparison: second number" in " ".join(out.split())
    clean = _flywheel_evidence(FlywheelState(last_report=RoundTable(rounds=[row.model_copy(update={"shortcuts": []})],
                                                                    base=base)))
    assert "Shortcuts" not in clean
