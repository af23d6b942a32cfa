"""`arena plan`: the calls it counts before a run equal the calls the run makes (answers turn by turn, judge
games by schedule, both orders, per turn), and what it counts as cached is what the ledger serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from arena_learning import pipeline
from arena_learning.config import JudgeConfig, RunConfig
from arena_learning.plan import estimate_tokens, plan_run
from arena_learning.records import Answer, Prompt
from arena_learning.store import Store

from .conftest import REPO, arena, shared
from .test_judge_runs import scripted_judge


@pytest.fixture
def judge_server(scripted_server):
    return scripted_server(scripted_judge)


def judge(url: str, **extra) -> dict:
    return {"kind": "llm", "name": "pj", "retries": 0,
            "model": {"name": "judge", "engine": "openai", "model": "judge", "base_url": url, "price_in": 1.0,
                      "price_out": 2.0, "params": {"max_tokens": 64}}, **extra}


def imported_workspace(path) -> Store:
    store = Store(path)
    prompts = [Prompt(id="p1", turns=["Q one"]), Prompt(id="p2", turns=["Q two"]),
               Prompt(id="p3", turns=["Q three", "Q three, part 2"])]
    store.put_prompts("open", prompts)
    for model, word in [("m1", "good"), ("m2", "weak"), ("m3", "meh")]:
        store.put_answers([Answer(prompt_id=p.id, model=model, turns=[f"a {word} answer {i}" for i, _ in
                                                                      enumerate(p.turns)]) for p in prompts])
    # m3 has no answer to p2 (imported answers can be incomplete): p2 has no games with m3
    store.delete_answers("m3", ["p2"], pipeline.TEST_SET)
    return store


def imported_config(url: str, **battles) -> RunConfig:
    return RunConfig.model_validate({"name": "plan", "prompts": {"set": "open"},
                                     "models": [{"name": m, "engine": "imported"} for m in ("m1", "m2", "m3")],
                                     "judge": judge(url), "battles": battles})


def lines(plan, step):
    return {x.model: x for x in plan.lines if x.step == step}


def test_plan_counts_the_judge_calls_the_battles_make_and_what_the_ledger_holds(tmp_path, judge_server):
    store = imported_workspace(tmp_path / "ws")
    cfg = imported_config(judge_server.url, schedule="baseline", baseline="m1")
    prompts = pipeline.stage_prompts(cfg, store)
    plan = plan_run(cfg, store)
    (j,) = lines(plan, "judge").values()
    # m2 vs m1 on p1, p2 (1 turn) and p3 (2 turns), both orders: 8; m3 vs m1 on p1, p3 (p2 unanswered): 6
    assert (j.calls, j.cached, j.to_send) == (14, 0, 14)
    assert lines(plan, "answer")["m3"].note == "imported: 2 of 3 answers in the workspace"
    report = pipeline.stage_battle(cfg, store, show_progress=False, prompts=prompts)
    assert report.stats["cached"] + report.stats["sent"] == j.calls and report.stats["sent"] == j.to_send
    assert len(judge_server.bodies) == 14
    # Tokens: the judge prompts sent, characters / 4; output at most max_tokens; cost at the judge's prices.
    assert j.tokens_in == sum(estimate_tokens(sum(len(m["content"]) for m in b["messages"]))
                              for b in judge_server.bodies)
    assert j.tokens_out == sum(b["max_tokens"] for b in judge_server.bodies) == 14 * 512  # the judge folder's
    assert j.cost == pytest.approx((j.tokens_in * 1.0 + 14 * 512 * 2.0) / 1e6)
    # The round robin after the baseline run: the pairs with m1 are in the ledger, m2 vs m3 is new.
    rr = imported_config(judge_server.url, schedule="all")
    (j2,) = lines(plan_run(rr, store), "judge").values()
    assert (j2.calls, j2.cached, j2.to_send) == (14 + 6, 14, 6)
    assert j2.tokens_out == 6 * 512
    again = pipeline.stage_battle(rr, store, show_progress=False, prompts=prompts)
    assert (again.stats["cached"], again.stats["sent"]) == (14, 6) and len(judge_server.bodies) == 20
    # A rerun costs nothing.
    (j3,) = lines(plan_run(rr, store), "judge").values()
    assert (j3.calls, j3.cached, j3.to_send, j3.cost) == (20, 20, 0, 0.0)


def test_single_grading_and_panels_are_counted_as_they_call(tmp_path, judge_server):
    store = imported_workspace(tmp_path / "ws")
    single = imported_config(judge_server.url, schedule="all").model_copy(
        update={"judge": JudgeConfig.model_validate(judge(judge_server.url, template="single"))})
    prompts = pipeline.stage_prompts(single, store)
    (j,) = lines(plan_run(single, store), "judge").values()
    # each answer graded once per turn: m1, m2 on p1 p2 (1) and p3 (2): 8; m3 on p1, p3: 3
    assert j.calls == 11
    report = pipeline.stage_battle(single, store, show_progress=False, prompts=prompts)
    assert report.stats["sent"] == 11
    panel = RunConfig.model_validate({
        "name": "plan", "prompts": {"set": "open"},
        "models": [{"name": m, "engine": "imported"} for m in ("m1", "m2")],
        "judge": {"kind": "panel", "name": "panel", "members": [judge(judge_server.url, name="a"),
                                                                 judge(judge_server.url, name="b",
                                                                       both_orders=False)]}})
    plan = lines(plan_run(panel, store), "judge")
    assert (plan["a"].calls, plan["b"].calls) == (8, 4)
    # a and b ask the same judge model: b's one-order games are a's first orders, served by the ledger
    assert (plan["a"].cached, plan["b"].cached) == (0, 4)
    before = len(judge_server.bodies)
    pipeline.stage_battle(panel, store, show_progress=False, prompts=prompts)
    assert len(judge_server.bodies) - before == 8


def test_adaptive_is_planned_as_its_budget(tmp_path, judge_server):
    store = imported_workspace(tmp_path / "ws")
    cfg = imported_config(judge_server.url, schedule="adaptive", budget=3)
    (j,) = lines(plan_run(cfg, store), "judge").values()
    # 3 battles x 2 orders x the mean turns (4/3) of the prompts every model answered (p1, p3)
    assert j.calls == round(3 * 2 * 1.5) and j.cached is None and "at most 3 battles of 6" in j.note


def test_arena_plan_cli_json_and_table(tmp_path, judge_server):
    store = imported_workspace(tmp_path / "ws")
    store.close()
    cfg = imported_config(judge_server.url, schedule="all")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    out = arena("plan", path, "-w", tmp_path / "ws", "--json", cwd=REPO)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    with Store(tmp_path / "ws", readonly=True) as ro:
        assert got == json.loads(json.dumps(plan_run(cfg, ro, timed=True).as_json()))
    assert got["totals"]["calls"] == 20 and got["kind"] == "run" and "characters / 4" in got["tokens"]
    table = arena("plan", path, "-w", tmp_path / "ws", cwd=REPO)
    assert table.returncode == 0 and "to send" in table.stdout and "total" in table.stdout
    assert not list((tmp_path / "ws").glob("*.yaml"))  # plan writes nothing
    # Bad input: exit 2 and say what to do.
    missing = arena("plan", tmp_path / "nope.yaml", cwd=REPO)
    assert missing.returncode == 2 and "config file not found" in missing.stderr
    empty = arena("plan", path, "-w", tmp_path / "none", cwd=REPO)
    assert empty.returncode == 2 and "prompts.set 'open'" in empty.stderr and "arena ingest" in empty.stderr


@pytest.mark.slow
def test_plan_equals_the_calls_of_a_multi_turn_run_on_the_bundled_model(tmp_path, judge_server):
    questions = shared("mt_bench", "question.jsonl")
    model = {"engine": "llamacpp", "model": "bundled", "mode": "completion", "n_threads": 1,
             "params": {"max_tokens": 4, "temperature": 0.0, "stop": ["\n"]}}
    cfg = RunConfig.model_validate({
        "name": "mt", "prompts": {"path": str(questions), "limit": 3},
        "models": [{"name": "zero", **model},
                   {"name": "two", **model, "prompt_format": {"few_shot": [["What is 12 + 7?", "19"],
                                                                           ["What is 2 + 2?", "4"]]}},
                   {"name": "chat", **model, "mode": "chat", "chat_format": "gemma"}],
        "judge": judge(judge_server.url), "battles": {"schedule": "target", "target": "zero"}})
    before = plan_run(cfg, None)
    answers = lines(before, "answer")
    assert {m: (x.calls, x.cached) for m, x in answers.items()} == {m: (6, 0) for m in ("zero", "two", "chat")}
    (j,) = lines(before, "judge").values()
    assert j.calls == 2 * 3 * 2 * 2  # 2 pairs x 3 prompts x 2 orders x 2 turns
    with Store(tmp_path / "ws") as store:
        prompts = pipeline.stage_prompts(cfg, store)
        report = pipeline.stage_answer(cfg, store, show_progress=False, prompts=prompts)
        assert {m: s.cached + s.sent for m, s in report.stats.items()} == {m: x.calls for m, x in answers.items()}
        battle = pipeline.stage_battle(cfg, store, show_progress=False, prompts=prompts)
        assert battle.stats["cached"] + battle.stats["sent"] == j.calls
        after = plan_run(cfg, store)
    # Everything is in the ledger now: the plan says a rerun sends nothing.
    assert all(x.to_send == 0 and x.cost == 0 for x in after.lines)
    assert sum(x.cached for x in after.lines) == 18 + 24


# ---- the flywheel, per round and stage (slow: trains) ------------------------------------------------

FLYWHEEL = {
    "name": "planned",
    "tasks": {"n": 9, "seed": 0},
    "target": {"name": "student", "engine": "transformers", "model": "bundled", "mode": "completion",
               "params": {"max_tokens": 6, "temperature": 0.0, "stop": ["\n"]}},
    "references": [{"name": "ref-2shot", "engine": "llamacpp", "model": "bundled", "mode": "completion",
                    "n_threads": 1, "prompt_format": {"few_shot": [["What is 12 + 7?", "19"],
                                                                   ["What is the capital of Japan?", "Tokyo"]]},
                    "params": {"max_tokens": 6, "temperature": 0.0, "stop": ["\n"]}}],
    "judge": {"kind": "verifier"},
    "pool": {"D0": {"n": 6, "seed": 101}, "D1": {"n": 5, "seed": 102}},
    "rounds": [{"stages": [{"kind": "sft", "slice": "D0", "selection": "all"}]}],
    "training": {"sft": {"learning_rate": 1e-4, "epochs": 1, "max_steps": 1, "batch_size": 2, "micro_batch_size": 2,
                         "max_length": 48, "warmup_ratio": 0.0, "lora": {"r": 2, "alpha": 4}}},
    "ratings": {"bootstrap": 0},
    "evaluate": "rounds",
}


def test_the_flywheel_plan_prices_the_runs_schedule_stage_by_stage():
    from arena_learning.config import validate_config
    from arena_learning.flywheel.plan import plan_flywheel
    from arena_learning.flywheel.schedule import Evaluate, StageStep, schedule
    from arena_learning.flywheel.settings import FlywheelConfig

    # The shape of a longer run: dpo and rl (with a reward model) stages, an ablation, evaluation after every stage.
    longer = validate_config({**FLYWHEEL, "rounds": [
        {"stages": [{"kind": "sft", "slice": "D0"}]},
        {"stages": [{"kind": "dpo", "slice": "D1", "sweep": {"b0.1": {"beta": 0.1}}}, {"kind": "rl", "slice": "D1"}]}],
        "harvest": {"baselines": ["random"], "replay": True}, "evaluate": "stages",
        "training": {**FLYWHEEL["training"], "rl": {"reward": "model"}}}, FlywheelConfig, "test")
    plan = plan_flywheel(longer, None)
    stages = list(dict.fromkeys(x.stage for x in plan.lines))
    assert stages == ["r0.0-sft (D0)", "r0.0-sft-random (D0)", "evaluate after r0.0-sft", "r1.0-dpo (D1)",
                      "r1.0-dpo-random (D1)", "r1.0-dpo-b0.1 (D1)", "evaluate after r1.0-dpo", "r1.1-rl (D1)",
                      "evaluate after r1.1-rl"]
    trains = [(x.stage, x.model) for x in plan.lines if x.step == "train"]
    assert trains == [("r0.0-sft (D0)", "student-r0-sft"), ("r0.0-sft-random (D0)", "student-r0-sft-random"),
                      ("r1.0-dpo (D1)", "student-r1-dpo"), ("r1.0-dpo-random (D1)", "student-r1-dpo-random"),
                      ("r1.0-dpo-b0.1 (D1)", "student-r1-dpo-b0.1"),  # the sweep's variant: trained, not battled
                      ("r1.1-rl (D1)", "student-r1-rl (reward model)"), ("r1.1-rl (D1)", "student-r1-rl")]
    assert [x.model for x in plan.lines if x.stage == "evaluate after r1.0-dpo" and x.step == "answer"] == [
        "student-r1-dpo", "student-r1-dpo-random", "student-r1-dpo-b0.1"]
    assert not [x for x in plan.lines if x.stage == "r1.0-dpo-b0.1 (D1)" and x.step != "train"]
    by = {(x.stage, x.step, x.model): x for x in plan.lines}
    # D1 is answered once by the dpo stage's model; the rl stage's battles on it need only the new model's answers
    assert by[("r1.0-dpo (D1)", "answer", "student-r0-sft")].calls == 5
    assert by[("r1.1-rl (D1)", "answer", "student-r1-dpo")].calls == 5
    assert ("r1.1-rl (D1)", "answer", "ref-2shot") not in by
    # every evaluation asks only the models not yet rated: the first one the references, the base, r0 and its ablation
    firsts = [x.model for x in plan.lines if x.stage == "evaluate after r0.0-sft" and x.step == "answer"]
    assert firsts == ["ref-2shot", "student-base", "student-r0-sft", "student-r0-sft-random"]
    assert "sft on <= 6 examples" in by[("r0.0-sft (D0)", "train", "student-r0-sft")].note
    assert "rm on <= 5 pairs" in by[("r1.1-rl (D1)", "train", "student-r1-rl (reward model)")].note
    # the runner's steps (Flywheel.run executes the same schedule), in the same order
    walked = []
    for step in schedule(longer, Path("flywheel"), ["random"]):
        if isinstance(step, StageStep):
            step.made = True
            walked.append(step.label)
        elif isinstance(step, Evaluate):
            walked.append(f"evaluate after {step.after.key}")
    assert walked == stages


@pytest.mark.slow
def test_flywheel_plan_per_stage_equals_the_calls_the_flywheel_makes(trained_flywheel, monkeypatch):
    from arena_learning.config import validate_config
    from arena_learning.flywheel.plan import plan_flywheel
    from arena_learning.flywheel.settings import FlywheelConfig

    # The run itself: a plan before it (no workspace yet) counts per model the calls the ledger then holds. The
    # target answers as the quickstart's does: through llama.cpp from its GGUF export, whose calls the plan of a
    # finished run must find in the ledger under the export's identity. The run is the session's trained flywheel:
    # FLYWHEEL served through llama.cpp (and trained through `accelerate launch`, which changes no call).
    cfg = validate_config(trained_flywheel.config, FlywheelConfig, "test")
    assert cfg.training.serve_as == "llamacpp"
    launch = trained_flywheel.config["training"]["launch"]
    sft = {**FLYWHEEL["training"]["sft"], "max_steps": 3}  # the session's flywheel trains three steps, not one
    assert trained_flywheel.config == {**FLYWHEEL, "training": {**FLYWHEEL["training"], "sft": sft,
                                                                "serve_as": "llamacpp", "launch": launch}}
    before = plan_flywheel(cfg, None)
    planned: dict[str, int] = {}
    for x in before.lines:
        planned[x.model] = planned.get(x.model, 0) + x.to_send
    planned = {m: n for m, n in planned.items() if n}
    # D0: student-base and the reference 6 each; the test set: 9 each for them and the trained model
    assert planned == {"student-base": 15, "ref-2shot": 15, "student-r0-sft": 9}
    with Store(trained_flywheel.workspace, readonly=True) as store:
        made = dict(store.db.execute("SELECT requested_by, COUNT(*) FROM calls GROUP BY requested_by").fetchall())
        assert made == planned
        after = plan_flywheel(cfg, store, timed=True)
    # A rerun: the stage is done and every call is in the ledger: nothing to send, nothing to wait for.
    assert all(x.to_send == 0 for x in after.lines)
    assert next(x.note for x in after.lines if x.step == "train").startswith("done in an earlier run")
    assert all(x.seconds == 0.0 for x in after.lines) and after.minutes()["total"] == 0.0
    # The run recorded its training and its harvest in its rates file: a new workspace's plan times the stage's
    # training from them.
    monkeypatch.setenv("ARENA_RATES", str(trained_flywheel.rates))
    again = plan_flywheel(cfg, None, timed=True)
    (train,) = [x for x in again.lines if x.step == "train"]
    assert train.seconds is not None and train.seconds > 0 and " steps of " in train.timing
