"""Aimed slices (allocate: weakness, learnable): prompts go where the model is behind (and, learnable, where training
moves it), floors hold, sizes and draws are fixed."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from arena_learning.config import validate_config
from arena_learning.errors import ConfigError
from arena_learning.flywheel.aim import aim, floor_of, shares
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.flywheel.slices import slice_prompts
from arena_learning.rating.gaps import group_gaps
from arena_learning.records import Battle, Prompt

from .test_plan import FLYWHEEL

CATS = ["arith", "dates", "yes_no", "case"]


def test_a_group_far_behind_gets_more_and_every_group_keeps_its_floor():
    got = shares({"arith": 0.0, "dates": 10.0, "yes_no": 200.0, "case": 0.0},
                 dict.fromkeys(CATS, 1000), 200)
    assert sum(got.values()) == 200
    assert floor_of(200, 4) == 25  # half the uniform share of 50
    assert min(got.values()) == 25
    assert got["yes_no"] > got["dates"] > got["arith"] == got["case"] == 25
    assert got["yes_no"] == 25 + round(100 * 200 / 210)


def test_no_deficit_is_uniform_and_a_short_group_passes_its_excess_on():
    assert shares({}, dict.fromkeys(CATS, 100), 10) == {"arith": 3, "case": 3, "dates": 2, "yes_no": 2}
    short = shares({"yes_no": 100.0}, {"arith": 100, "dates": 100, "yes_no": 30, "case": 100}, 200)
    assert short["yes_no"] == 30 and sum(short.values()) == 200


def planted(seed: int = 0) -> tuple[list[Battle], list[Prompt]]:
    """Test battles of ``student`` and two references, 20 prompts per category: the student loses yes_no to the
    best reference on 19 of 20 prompts and wins half of the rest."""
    rng = random.Random(seed)
    prompts = [Prompt(id=f"{c}-{k}", turns=[f"{c} {k}"], category=c) for c in CATS for k in range(20)]
    battles = []
    for p in prompts:
        lose = 0.95 if p.category == "yes_no" else 0.5
        for other, pl in (("big", lose), ("small", 0.3)):
            out = "model_b" if rng.random() < pl else "model_a"
            battles.append(Battle(prompt_id=p.id, model_a="student", model_b=other, outcome=out, judge="v"))
        battles.append(Battle(prompt_id=p.id, model_a="big", model_b="small", outcome="model_a", judge="v"))
    return battles, prompts


def test_the_slice_is_aimed_at_the_planted_gap_with_its_size_and_draw_fixed():
    battles, test = planted()
    gaps = group_gaps(battles, test, "category", "student", bootstrap=100, seed=0)
    cands = [Prompt(id=f"c{k}-{c}", turns=[f"train {c} {k}"], category=c) for k in range(50) for c in CATS]
    picked, alloc = aim(cands, 80, gaps, model="student", basis="b", stage="r1.0-sft")
    again, _ = aim(cands, 80, gaps, model="student", basis="b", stage="r1.0-sft")
    assert [p.id for p in picked] == [p.id for p in again]  # deterministic
    assert len(picked) == 80 and len({p.id for p in picked}) == 80
    by = {g.group: g for g in alloc.groups}
    assert by["yes_no"].prompts == max(g.prompts for g in alloc.groups) > 20
    assert all(g.prompts >= alloc.floor == 10 for g in alloc.groups)
    assert by["yes_no"].gap is not None and by["yes_no"].gap < 0 and alloc.best == "big"
    assert "yes_no" in alloc.why
    even, control = aim(cands, 80, gaps, model="student", basis="b", rule="even")
    assert [g.prompts for g in control.groups] == [20] * 4 and control.rule == "even"
    none, uni = aim(cands, 80, None, model="student", basis="b", why_none="no evaluation yet")
    assert [p.id for p in none] == [p.id for p in even] and uni.why.startswith("uniform: no evaluation")


def test_learnable_weighs_each_gap_by_how_far_training_moved_the_model_there():
    # yes_no: far behind and training moved nothing there (both models lose it); case: behind, and training moved
    # the model from losing every case prompt to losing a third. Learnable gives case the most, yes_no its floor;
    # weakness gives yes_no the most.
    prompts = [Prompt(id=f"{c}-{k}", turns=[f"{c} {k}"], category=c) for c in CATS for k in range(30)]
    battles = []
    for p in prompts:
        k = int(p.id.split("-")[-1])
        lose_now = {"yes_no": True, "case": k % 3 == 0}.get(p.category, k % 2 == 0)
        lose_then = {"yes_no": True, "case": True}.get(p.category, k % 2 == 0)
        for model, lose in (("student-r0", lose_now), ("student", lose_then)):
            battles.append(Battle(prompt_id=p.id, model_a=model, model_b="big",
                                  outcome="model_b" if lose else "model_a", judge="v"))
            battles.append(Battle(prompt_id=p.id, model_a="small", model_b=model, outcome="tie", judge="v"))
        battles.append(Battle(prompt_id=p.id, model_a="big", model_b="small", outcome="model_a", judge="v"))
    from arena_learning.flywheel.aim import moved

    move = moved(battles, prompts, "category", "student-r0", "student", ["big", "small"])
    assert move["yes_no"] == 0.0 == move["arith"] == move["dates"]
    assert move["case"] == pytest.approx((2 / 3) / 2)  # won 2 of 3 against big where it lost all; ties with small
    gaps = group_gaps([b for b in battles if "student" not in (b.model_a, b.model_b)], prompts, "category",
                      "student-r0", bootstrap=100, seed=0)
    cands = [Prompt(id=f"c{k}-{c}", turns=[f"train {c} {k}"], category=c) for k in range(50) for c in CATS]
    _, weak = aim(cands, 80, gaps, model="student-r0", basis="b")
    picked, learn = aim(cands, 80, gaps, model="student-r0", basis="b", rule="learnable", movement=move,
                        before="student")
    w = {g.group: g.prompts for g in weak.groups}
    got = {g.group: g.prompts for g in learn.groups}
    assert max(w, key=lambda g: w[g]) == "yes_no" and w["yes_no"] > got["yes_no"]
    assert got["case"] == 80 - 3 * learn.floor and got["yes_no"] == got["arith"] == learn.floor == 10
    assert len(picked) == 80 and {g.group: g.moved for g in learn.groups}["case"] == pytest.approx(1 / 3, abs=1e-3)
    assert "times how far training moved student-r0 from student" in learn.why and "case" in learn.why
    # no model before, or nothing moved: the gaps alone, as weakness, and the line says so
    _, alone = aim(cands, 80, gaps, model="student-r0", basis="b", rule="learnable")
    assert [g.prompts for g in alone.groups] == [g.prompts for g in weak.groups]
    assert "alone (no model before student-r0" in alone.why
    _, still = aim(cands, 80, gaps, model="student-r0", basis="b", rule="learnable",
                   movement=dict.fromkeys(CATS, 0.0), before="student")
    assert [g.prompts for g in still.groups] == [g.prompts for g in weak.groups]
    assert "moved student-r0 from student in no group where it is behind" in still.why
    _, unmet = aim(cands, 80, gaps, model="student-r0", basis="b", rule="learnable", movement={}, before="student")
    assert [g.prompts for g in unmet.groups] == [g.prompts for g in weak.groups]
    assert "student-r0 and student met the references on no test prompt of a group" in unmet.why


def test_an_aimed_slice_with_no_gaps_is_the_uniform_slice_and_bans_its_candidates():
    plain = validate_config(FLYWHEEL, FlywheelConfig, "plain")
    rounds = [*FLYWHEEL["rounds"], {"stages": [{"kind": "sft", "slice": "D1", "allocate": "weakness"}]}]
    aimed = validate_config({**FLYWHEEL, "rounds": rounds}, FlywheelConfig, "aimed")
    assert aimed.aimed_slices() == {"D1"} and plain.aimed_slices() == set()
    cands: dict[str, list[Prompt]] = {}
    got = slice_prompts(aimed, [], None, candidates=cands)
    want = slice_prompts(plain, [], None)
    assert [p.id for p in got["D1"][0]] == [p.id for p in want["D1"][0]]  # what the plan prices: the same size
    assert len(cands["D1"]) > len(got["D1"][0]) and "D0" not in cands


def test_a_stage_without_allocate_keeps_its_saved_form():
    cfg = validate_config(FLYWHEEL, FlywheelConfig, "plain")
    assert "allocate" not in cfg.rounds[0].stages[0].model_dump()


@pytest.mark.parametrize("rounds, pool, says", [
    ([{"stages": [{"kind": "sft", "slice": "D0"}]},
      {"stages": [{"kind": "dpo", "slice": "D0", "allocate": "weakness"}]}],
     None, "set allocate on the slice's first stage"),
    ([{"stages": [{"kind": "sft", "slice": "D0", "allocate": "weakness"}]}], {"D0": {"set": "pool/D0"}},
     "set pool.D0.limit"),
])
def test_an_aimed_slice_that_cannot_be_drawn_is_refused(rounds, pool, says):
    with pytest.raises(ConfigError, match=says):
        validate_config({**FLYWHEEL, "rounds": rounds, **({"pool": pool} if pool else {})}, FlywheelConfig, "cfg")


def test_the_runner_draws_an_aimed_slice_once_stores_it_and_records_why(tmp_path):
    # The runner's own path (Flywheel.make_slices, Flywheel.aim) on a real workspace: the test set's battles of the
    # model the round starts from are planted (it loses unit_conversion to the reference), nothing is trained.
    from arena_learning.flywheel.rounds import Flywheel
    from arena_learning.flywheel.schedule import StageStep, schedule
    from arena_learning.flywheel.slices import slice_set
    from arena_learning.flywheel_state import load_state, state_path
    from arena_learning.store import Store

    rounds = [*FLYWHEEL["rounds"], {"stages": [{"kind": "sft", "slice": "D1", "allocate": "weakness"}]}]
    cfg = validate_config({**FLYWHEEL, "tasks": {"n": 180, "seed": 0}, "pool": {"D0": {"n": 6, "seed": 101},
                          "D1": {"n": 90, "seed": 102}}, "rounds": rounds}, FlywheelConfig, "aimed")
    said: list[str] = []
    with Store(tmp_path / "ws") as store:
        fw = Flywheel(cfg, store, show_progress=False, say=said.append)
        fw.make_slices()
        assert slice_set("D1") not in store.prompt_sets()  # stored when drawn, before its first answer
        rng = random.Random(0)
        battles = []
        for p in fw.test_prompts():
            lose = 0.95 if p.category == "unit_conversion" else 0.4
            out = "model_b" if rng.random() < lose else "model_a"
            battles.append(Battle(prompt_id=p.id, model_a="student-r0-sft", model_b="ref-2shot", outcome=out,
                                  judge="verifier"))
        store.replace_battles("verifier", battles, "test")
        steps = []
        for step in schedule(cfg, fw.root, []):
            if isinstance(step, StageStep):
                step.made, step.fingerprint = True, f"fp-{step.key}"
                steps.append(step)
        fw.aim(steps[1])
        drawn = store.get_prompts(slice_set("D1"))
        alloc = load_state(state_path(tmp_path / "ws")).slices["D1"].allocation
        assert alloc is not None and alloc.basis == "fp-r0.0-sft" and alloc.model == "student-r0-sft"
        assert len(drawn) == 90 and alloc.floor == 5
        per = {g.group: g.prompts for g in alloc.groups}
        assert max(per, key=lambda g: per[g]) == "unit_conversion" and per["unit_conversion"] > 10
        assert sum(per.values()) == 90 and sorted({p.category for p in drawn}) == sorted(per)
        assert any("slice D1 aimed at student-r0-sft's gaps" in m for m in said)
        # a resume reads the drawn slice back and draws nothing again
        again = Flywheel(cfg, store, show_progress=False, say=said.append)
        again.make_slices()
        n_said = len(said)
        again.aim(steps[1])
        assert len(said) == n_said and [p.id for p in again._slices["D1"]] == [p.id for p in drawn]
    # arena info says how the slice was spent
    from typer.testing import CliRunner

    from arena_learning.cli import app

    info = CliRunner().invoke(app, ["info", str(tmp_path / "ws"), "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.stdout)["aimed_slices"]["D1"]["stage"] == "r1.0-sft"
    table = CliRunner().invoke(app, ["info", str(tmp_path / "ws")], env={"COLUMNS": "300"})
    assert "slice D1 (weakness)" in table.stdout and "unit_conversion" in table.stdout


def test_the_runner_measures_learnable_against_the_model_the_last_training_started_from(tmp_path):
    # Flywheel.aim with allocate: learnable on a real workspace: round 0's start (the base) and its model both have
    # planted test battles; the base loses everything, the round-0 model wins a third of letter_case and loses
    # everything else. The runner compares them (the stage before's start), and letter_case gets the slice.
    from arena_learning.flywheel.rounds import Flywheel
    from arena_learning.flywheel.schedule import StageStep, schedule
    from arena_learning.flywheel_state import load_state, state_path
    from arena_learning.store import Store

    rounds = [*FLYWHEEL["rounds"], {"stages": [{"kind": "sft", "slice": "D1", "allocate": "learnable"}]}]
    cfg = validate_config({**FLYWHEEL, "tasks": {"n": 180, "seed": 0}, "pool": {"D0": {"n": 6, "seed": 101},
                          "D1": {"n": 90, "seed": 102}}, "rounds": rounds}, FlywheelConfig, "learnable")
    with Store(tmp_path / "ws") as store:
        fw = Flywheel(cfg, store, show_progress=False, say=lambda _: None)
        fw.make_slices()
        steps = []
        for step in schedule(cfg, fw.root, []):  # each step made before the next is planned: round 1 starts from r0
            if isinstance(step, StageStep):
                step.made, step.fingerprint = True, f"fp-{step.key}"
                steps.append(step)
        base = steps[0].start.name
        battles, seen = [], Counter[str]()
        for p in fw.test_prompts():
            seen[p.category] += 1
            won_now = p.category == "letter_case" and seen[p.category] % 3 == 1  # a third: moved, still behind
            for model, won in ((base, False), ("student-r0-sft", won_now)):
                battles.append(Battle(prompt_id=p.id, model_a=model, model_b="ref-2shot",
                                      outcome="model_a" if won else "model_b", judge="verifier"))
        store.replace_battles("verifier", battles, "test")
        fw.aim(steps[1])
        alloc = load_state(state_path(tmp_path / "ws")).slices["D1"].allocation
    assert alloc is not None and alloc.rule == "learnable" and f"from {base}" in alloc.why
    per = {g.group: g for g in alloc.groups}
    assert per["letter_case"].moved is not None and per["letter_case"].moved > 0.2
    assert max(per, key=lambda g: per[g].prompts) == "letter_case"
    assert all(g.prompts == alloc.floor for name, g in per.items() if name != "letter_case")


@pytest.mark.slow
def test_an_aimed_round_after_a_trained_one_draws_its_slice_trains_and_resumes(trained_flywheel, tmp_path):
    # The session's trained flywheel (one SFT round), copied, with a second round on an aimed D1: the real runner
    # draws D1 from round 0's evaluation before D1's first answer, trains on it, and a rerun draws nothing again.
    import shutil

    import yaml

    from arena_learning.flywheel.slices import slice_set
    from arena_learning.store import Store

    from .conftest import arena, write_config

    ws = tmp_path / "ws"
    shutil.copytree(trained_flywheel.workspace, ws)
    data = json.loads(json.dumps(trained_flywheel.config))
    data["rounds"].append({"stages": [{"kind": "sft", "slice": "D1", "selection": "all", "allocate": "weakness"}]})
    del data["training"]["launch"]  # round 1 trains in this process (how it trains is not in a stage's fingerprint)
    cfg = write_config(tmp_path / "aimed.yaml", yaml.safe_dump(data, sort_keys=False))
    ran = arena("flywheel", cfg, "-w", ws, "--json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout)
    alloc = report["slices"]["D1"]["allocation"]
    assert alloc["stage"] == "r1.0-sft" and alloc["model"] == "student-r0-sft" and alloc["rule"] == "weakness"
    assert sum(g["prompts"] for g in alloc["groups"]) == 5 == report["slices"]["D1"]["prompts"]
    assert "slice D1 aimed at student-r0-sft's gaps" in ran.stderr
    assert [r["model"] for r in report["rounds"]] == ["student-r0-sft", "student-r1-sft"]
    with Store(ws, readonly=True) as store:
        drawn = [p.id for p in store.get_prompts(slice_set("D1"))]
        answered = {a.prompt_id for a in store.get_answers("student-r0-sft", slice_set("D1"))}
    assert len(drawn) == 5 and answered == set(drawn)
    again = arena("flywheel", cfg, "-w", ws, "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "aimed at" not in again.stderr and json.loads(again.stdout)["slices"]["D1"]["allocation"] == alloc


def test_arena_plan_shows_the_rule_and_prices_an_aimed_slice_as_a_uniform_one():
    from arena_learning.flywheel.plan import plan_flywheel

    plain_rounds = [*FLYWHEEL["rounds"], {"stages": [{"kind": "sft", "slice": "D1"}]}]
    aimed_rounds = [*FLYWHEEL["rounds"], {"stages": [{"kind": "sft", "slice": "D1", "allocate": "weakness"}]}]
    plain = plan_flywheel(validate_config({**FLYWHEEL, "rounds": plain_rounds}, FlywheelConfig, "plain"), None)
    aimed = plan_flywheel(validate_config({**FLYWHEEL, "rounds": aimed_rounds}, FlywheelConfig, "aimed"), None)
    assert [(x.stage, x.step, x.model, x.calls) for x in aimed.lines] == [
        (x.stage, x.step, x.model, x.calls) for x in plain.lines]
    (note,) = [n for n in aimed.notes if "allocate" in n]
    assert note.startswith("slice D1: allocate: weakness: drawn when stage r1.0 starts: its 5 prompts")
    assert not [n for n in plain.notes if "allocate" in n]
    aimed_rounds[-1]["stages"][0]["allocate"] = "learnable"
    learnable = plan_flywheel(validate_config({**FLYWHEEL, "rounds": aimed_rounds}, FlywheelConfig, "learn"), None)
    (note,) = [n for n in learnable.notes if "allocate" in n]
    assert "allocate: learnable" in note and "how far its last training moved it there" in note
