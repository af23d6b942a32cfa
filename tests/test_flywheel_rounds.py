"""Rounds: slices, config checks, and a flywheel killed (SIGKILL) during training that resumes without redoing
finished stages; `arena flywheel --json` and `arena harvest` on its workspace."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from arena_learning.config import validate_config
from arena_learning.errors import ConfigError
from arena_learning.flywheel.settings import FlywheelConfig, SliceSpec
from arena_learning.flywheel.slices import slice_prompts, task_slice
from arena_learning.flywheel_state import load_state, state_path
from arena_learning.tasks import generate_tasks

from .conftest import ARENA, arena

CONFIG = {
    "name": "resume",
    "tasks": {"n": 9, "seed": 0},
    "target": {"name": "student", "engine": "transformers", "model": "bundled", "mode": "completion",
               "params": {"max_tokens": 6, "temperature": 0.0, "stop": ["\n"]}},
    "references": [{"name": "ref-4shot", "engine": "llamacpp", "model": "bundled", "mode": "completion",
                    "n_threads": 1,
                    "prompt_format": {"few_shot": [["What is 12 + 7?", "19"],
                                                   ["What is the capital of Japan?", "Tokyo"],
                                                   ["Write the word 'river' in uppercase letters.", "RIVER"],
                                                   ["How many letters are in the word 'stone'?", "5"]]},
                    "params": {"max_tokens": 6, "temperature": 0.0, "stop": ["\n"]}}],
    "judge": {"kind": "verifier"},
    # another name for the rating judge: the test set's battles are stored apart from the slices' (two judges)
    "eval_judge": {"kind": "verifier", "name": "checker"},
    "pool": {"D0": {"n": 6, "seed": 101}, "D1": {"n": 9, "seed": 102}},
    # selection 'all' trains on every reference answer: data whatever the battles say
    "rounds": [{"stages": [{"kind": "sft", "slice": "D0", "selection": "all"}]},
               {"stages": [{"kind": "sft", "slice": "D1", "selection": "all"}]}],
    "harvest": {"replay": True},
    "training": {"sft": {"learning_rate": 1e-4, "epochs": 1, "batch_size": 1, "micro_batch_size": 1, "max_length": 48,
                         "save_steps": 1, "warmup_ratio": 0.0, "lora": {"r": 2, "alpha": 4}}},
    "ratings": {"bootstrap": 10},
    "evaluate": "rounds",
    "evaluate_base": False,
}


def config(**changes) -> FlywheelConfig:
    data = json.loads(json.dumps(CONFIG))
    data.update(changes)
    return validate_config(data, FlywheelConfig, "test")


# ---- fast -------------------------------------------------------------------------------------------


def test_a_flywheel_config_refuses_a_non_transformers_target_an_unknown_slice_and_dpo_loss():
    with pytest.raises(ConfigError, match="engine must be 'transformers'"):
        config(target={**CONFIG["target"], "engine": "llamacpp"})
    with pytest.raises(ConfigError, match="slice 'D9'"):
        config(rounds=[{"stages": [{"kind": "sft", "slice": "D9"}]}])
    with pytest.raises(ConfigError, match="unknown DPO loss_type"):
        config(training={"dpo": {"loss_type": ["nope"]}})
    assert config().training.sft.accumulation == 1


def test_a_stage_sweep_is_checked_when_the_config_loads_and_leaves_the_main_stage_as_it_was(tmp_path):
    from arena_learning.flywheel.fingerprint import stage_fingerprint
    from arena_learning.flywheel.schedule import StageStep, schedule

    def rounds(sweep):
        stage = {"kind": "dpo", "slice": "D1", **({"sweep": sweep} if sweep is not None else {})}
        return [{"stages": [{"kind": "sft", "slice": "D0"}]}, {"stages": [stage]}]

    with pytest.raises(ConfigError, match=r"sweep lr: lr not a setting of training.dpo \(it has learning_rate"):
        config(rounds=rounds({"lr": {"lr": 1e-4}}))
    with pytest.raises(ConfigError, match=r"rounds.1: stage dpo, sweep x: beta: Input should be greater than 0 \(got"):
        config(rounds=rounds({"x": {"beta": -1}}))
    with pytest.raises(ConfigError, match="sweep variant 'random': a name of lowercase letters"):
        config(rounds=rounds({"random": {"beta": 0.2}}))
    with pytest.raises(ConfigError, match="unknown DPO loss_type"):
        config(rounds=rounds({"x": {"loss_type": ["nope"]}}))
    plain, swept = config(rounds=rounds(None)), config(rounds=rounds({"b0.2": {"beta": 0.2}, "b0.5": {"beta": 0.5}}))
    assert "sweep" not in plain.model_dump()["rounds"][1]["stages"][0]  # unset: not written
    assert swept.training.settings("dpo", {"beta": 0.2}).beta == 0.2 and swept.training.dpo.beta == 0.3
    # The main stage's fingerprint is the same with or without a sweep (adding a variant redoes nothing);
    # each variant's differs from the main stage's and from the other's.
    def fingerprints(cfg):
        out = {}
        for step in schedule(cfg, tmp_path, []):
            if isinstance(step, StageStep):
                step.made = True
                step.fingerprint = stage_fingerprint(cfg, step, step.follows.fingerprint if step.follows else "x")
                out[step.key] = step.fingerprint
        return out

    main, swept_fps = fingerprints(plain), fingerprints(swept)
    assert swept_fps["r1.0-dpo"] == main["r1.0-dpo"]
    assert len({main["r1.0-dpo"], swept_fps["r1.0-dpo-b0.2"], swept_fps["r1.0-dpo-b0.5"]}) == 3


def test_the_search_example_is_the_world_example_with_a_dpo_and_an_rl_sweep_after_it():
    from arena_learning.config import load_config_file

    examples = Path(__file__).resolve().parents[1] / "examples"
    world = load_config_file(examples / "flywheel-world.yaml", FlywheelConfig)
    search = load_config_file(examples / "flywheel-search.yaml", FlywheelConfig)
    # What the world's five SFT stages are made of is the same, so a world workspace resumes at round 5.
    assert search.rounds[:5] == world.rounds and len(search.rounds) == 7
    assert {k: v for k, v in search.pool.items() if k in world.pool} == world.pool
    for part in ("target", "references", "judge", "tasks", "harvest", "ratings"):
        assert getattr(search, part) == getattr(world, part), part
    assert search.training.sft == world.training.sft and search.training.serve_as == world.training.serve_as
    (dpo,), (rl,) = search.rounds[5].stages, search.rounds[6].stages
    assert (dpo.kind, rl.kind) == ("dpo", "rl") and len(dpo.sweep) + len(rl.sweep) + 2 >= 12  # the 12 settings
    for stage in (dpo, rl):
        for name, changes in stage.sweep.items():
            assert search.training.settings(stage.kind, changes) != getattr(search.training, stage.kind), name


def test_the_qwen_dpo_rl_example_is_the_qwen_students_first_two_rounds_then_dpo_and_chance_corrected_rl():
    from arena_learning.config import load_config_file

    examples = Path(__file__).resolve().parents[1] / "examples"
    sft = load_config_file(examples / "flywheel-qwen-student.yaml", FlywheelConfig)
    paper = load_config_file(examples / "flywheel-qwen-dpo-rl.yaml", FlywheelConfig)
    dpo_rl = load_config_file(examples / "flywheel-dpo-rl.yaml", FlywheelConfig)
    # A workspace of the Qwen student's three SFT rounds resumes at round 2: the first two rounds are the same stages.
    assert paper.rounds[:2] == sft.rounds[:2] and [s.kind for r in paper.rounds[2:] for s in r.stages] == ["dpo", "rl"]
    assert {k: v for k, v in paper.pool.items() if k in sft.pool} == sft.pool
    for part in ("target", "references", "judge", "tasks", "harvest", "ratings"):
        assert getattr(paper, part) == getattr(sft, part), part
    assert paper.training.sft == sft.training.sft and paper.training.serve_as == sft.training.serve_as
    assert paper.training.dpo == dpo_rl.training.dpo  # the settings measured on the gemma student
    rl = paper.training.rl
    assert rl.chance_corrected and rl.model_copy(update={"chance_corrected": False}) == dpo_rl.training.rl


def test_the_quickstart_is_five_sft_rounds_in_the_world_with_few_shot_samples_and_right_answers_only():
    from arena_learning.config import load_config_file
    from arena_learning.flywheel.plan import plan_flywheel

    examples = Path(__file__).resolve().parents[1] / "examples"
    cfg = load_config_file(examples / "flywheel-same-weights.yaml", FlywheelConfig)
    assert cfg.tasks.suite == 2 and [s.kind for r in cfg.rounds for s in r.stages] == ["sft"] * 5
    assert cfg.harvest.sft_min_score == 10 and cfg.harvest.replay and cfg.harvest.balance
    assert cfg.training.sft.start == "base"
    (ref,) = cfg.references
    samples = cfg.harvest.samples.variants(cfg.target)
    # three samples are the student shown the reference's twelve examples, one is zero-shot
    assert [m.prompt_format.few_shot == ref.prompt_format.few_shot for m in samples] == [True, True, True, False]
    slices = slice_prompts(cfg, [], None)
    assert [len(v[0]) for v in slices.values()] == [120, 200, 200, 200, 200]
    shown = {q for q, _ in ref.prompt_format.few_shot}
    assert not shown & {p.turns[0] for v in slices.values() for p in v[0]}
    plan = plan_flywheel(cfg, None)
    sampled = [x for x in plan.lines if x.step == "answer" and "-sample" in x.model]
    assert sum(x.calls for x in sampled) == 4 * (120 + 4 * 200)  # arena plan counts every sample


def test_the_rating_judge_is_eval_judge_or_the_harvesting_judge_and_the_table_says_which():
    two = config()
    models = [two.target, *two.references]
    assert two.arena_config(models, rating=True).judge.name == "checker"
    assert two.arena_config(models).judge.name == "verifier"  # the slices' battles: the harvesting judge
    assert two.judges_line() == "judges: verifier harvests the training data, checker rates the rounds"
    one = config(eval_judge=None)
    assert one.rating_judge is one.judge and one.arena_config(models, rating=True).judge.name == "verifier"
    assert "may serve as both" in one.judges_line()
    assert "eval_judge" not in one.model_dump()  # unset: not written, so saved configs and fingerprints stay
    with pytest.raises(ConfigError, match="eval_judge is named 'verifier', as judge, but is another judge"):
        config(eval_judge={"kind": "verifier", "name": "verifier", "tie_threshold": 1.0})


def test_task_slices_avoid_the_excluded_questions_and_give_what_small_categories_have():
    test = generate_tasks(90, seed=0)
    banned = {" ".join(t.lower().split()) for p in test for t in p.turns}
    got = task_slice(SliceSpec(n=270, seed=5), 5, banned)
    assert not [p for p in got if " ".join(p.turns[0].lower().split()) in banned]
    assert len({p.id for p in got}) == len(got) and 200 <= len(got) <= 270
    assert got == task_slice(SliceSpec(n=270, seed=5), 5, banned)  # seeded
    caps = task_slice(SliceSpec(n=400, seed=1, categories=["capitals"]), 1, banned)
    assert 0 < len(caps) < 400  # only so many countries


# ---- a real flywheel, killed during training (slow) ----------------------------------------------


def _wait_for_checkpoint(proc: subprocess.Popen, work: Path, timeout: float = 600) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the flywheel ended before a checkpoint of round 1 (exit {proc.returncode})")
        done = sorted(work.glob("checkpoint-*/trainer_state.json")) if work.is_dir() else []
        if done:
            return done[0].parent
        time.sleep(0.2)
    raise AssertionError("no checkpoint in time")


@pytest.fixture(scope="module")
def killed_and_resumed(module_tmp):
    tmp = module_tmp
    data = json.loads(json.dumps(CONFIG))
    data["training"]["sft"]["save_steps"] = 2  # a checkpoint every other step: 3 of 6, not 6
    cfg_path = tmp / "fw.yaml"
    cfg_path.write_text(yaml.safe_dump(data))
    ws = tmp / "ws"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Each round trains 6 steps (--set): the first run is killed once round 1 has a checkpoint, 4 steps before its end.
    cmd = [*ARENA, "flywheel", str(cfg_path), "-w", str(ws), "--set", "training.sft.max_steps=6"]
    with open(tmp / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            ckpt = _wait_for_checkpoint(proc, ws / "flywheel" / "round-1" / "0-sft" / "work")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    state = load_state(state_path(ws))
    with sqlite3.connect(ws / "arena.db") as db:
        ok_before = db.execute("SELECT COUNT(*) FROM calls WHERE status='ok'").fetchone()[0]
    # The rerun also asks for the selection ablation: the finished stages stay; the variants are trained beside them.
    # (In this process: what is tested is the resume, not a process of its own.)
    second = arena(*cmd[len(ARENA):], "--json", "--baselines", "random")
    return {"ws": ws, "ckpt": ckpt, "state_at_kill": state, "ok_before": ok_before, "second": second, "tmp": tmp}


@pytest.mark.slow
def test_a_killed_flywheel_resumes_without_redoing_finished_stages(killed_and_resumed):
    k = killed_and_resumed
    assert k["state_at_kill"].stages["r0.0-sft"].status == "done"
    assert k["state_at_kill"].stages["r1.0-sft"].status == "started"
    second = k["second"]
    assert second.returncode == 0, second.stderr[-3000:]
    log = second.stderr
    assert "r0.0-sft: done in an earlier run" in log
    assert "resumed from" in log and "checkpoint-" in log
    state = load_state(state_path(k["ws"]))
    r0, r1 = state.stages["r0.0-sft"], state.stages["r1.0-sft"]
    assert r0.train == k["state_at_kill"].stages["r0.0-sft"].train  # not trained again
    assert r1.status == "done" and r1.train.steps == 6 and r1.train.resumed_from
    assert r1.examples == 9 and r1.trained_on == 6 + 9  # replay: round 0's harvest too
    assert len(state.evaluations) == 2  # one per round, none repeated on resume
    with sqlite3.connect(k["ws"] / "arena.db") as db:
        # Nothing that had succeeded was asked again.
        assert db.execute("SELECT COUNT(*) FROM calls WHERE status='ok' AND attempts > 1").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM calls WHERE status='ok'").fetchone()[0] >= k["ok_before"]


@pytest.mark.slow
def test_flywheel_json_has_the_round_table(killed_and_resumed):
    out = json.loads(killed_and_resumed["second"].stdout)
    assert [r["round"] for r in out["rounds"]] == [0, 1]
    for r in out["rounds"]:
        assert set(r) >= {"round", "model", "rating", "ci_low", "ci_high", "sft_examples", "dpo_pairs", "rm_pairs",
                          "train_loss"}
        assert r["rating"] is not None and r["ci_low"] <= r["rating"] <= r["ci_high"]
    assert out["rounds"][0]["sft_examples"] == 6 and out["rounds"][1]["sft_examples"] == 9
    assert [r["model"] for r in out["references"]] == ["ref-4shot"]
    abl = {a["key"]: a for a in out["ablations"]}
    assert set(abl) == {"r0.0-sft-random", "r1.0-sft-random"}
    assert abl["r1.0-sft-random"]["selection"] == "random" and abl["r1.0-sft-random"]["examples"] == 9
    assert abl["r1.0-sft-random"]["rating"] is not None  # rated in the same table
    assert set(out["references"][0]) == {"model", "rating", "ci_low", "ci_high", "exact", "mean_chars",
                                         "mean_tokens", "style_rating", "style_ci_low", "style_ci_high", "shortcuts"}
    # paired deltas: the base is not rated here (evaluate_base: false), so round 0 has no model before it
    r0, r1 = out["rounds"]
    assert r0["delta_prev"] is None and r0["delta_base"] is None
    d = r1["delta_prev"]
    assert d["vs"] == r0["model"] and d["ci_low"] <= d["rating"] <= d["ci_high"]
    assert d["rating"] == pytest.approx(r1["rating"] - r0["rating"], abs=0.02)  # the round table's own ratings
    assert r1["delta_best_ref"]["vs"] == "ref-4shot"
    assert abl["r1.0-sft-random"]["delta_prev"]["vs"] == r0["model"]  # the variant started where r1.0-sft did
    assert r1["exact"]["of"] == 9 and r1["exact"]["vs"] == r0["model"] and r1["exact"]["gained"] is not None
    assert sum(c["n"] for c in r1["exact"]["per_category"].values()) == r1["exact"]["n"]
    assert r1["mean_chars"] is not None and out["references"][0]["mean_chars"] is not None
    # two judges: the slices' battles by the harvesting judge, the test set's by the rating judge, said in the table
    assert out["judges"] == "judges: verifier harvests the training data, checker rates the rounds"
    assert out["manifest"]["judge"]["name"] == "checker" and out["manifest"]["test_set"]["prompts"] == 9
    with sqlite3.connect(killed_and_resumed["ws"] / "arena.db") as db:
        by_set = dict(db.execute("SELECT set_name, GROUP_CONCAT(DISTINCT judge) FROM battles GROUP BY set_name"))
    assert by_set["test"] == "checker" and by_set["flywheel/D1"] == "verifier"


@pytest.mark.slow
def test_a_plain_rerun_keeps_the_ablations_the_workspace_trained(killed_and_resumed):
    """Without --baselines a rerun still rates the variants trained earlier (it used to drop their test battles)."""
    k = killed_and_resumed
    third = arena("flywheel", k["tmp"] / "fw.yaml", "-w", k["ws"], "--set", "training.sft.max_steps=6", "--json")
    assert third.returncode == 0, third.stderr[-3000:]
    abl = {a["key"]: a for a in json.loads(third.stdout)["ablations"]}
    assert set(abl) == {"r0.0-sft-random", "r1.0-sft-random"} and all(a["rating"] is not None for a in abl.values())
    assert "done in an earlier run" in third.stderr and "training the" not in third.stderr  # nothing retrained
    with sqlite3.connect(k["ws"] / "arena.db") as db:
        kept = db.execute("SELECT COUNT(*) FROM battles WHERE set_name='test' AND (model_a LIKE '%-random' "
                          "OR model_b LIKE '%-random')").fetchone()[0]
    assert kept > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind,out", [("sft", "sft.jsonl"), ("dpo", "dpo.parquet"), ("rm", "rm_hf")])
def test_arena_harvest_exports_a_flywheel_slice(killed_and_resumed, kind, out):
    from datasets import load_dataset, load_from_disk

    k = killed_and_resumed
    path = k["tmp"] / out
    args = ["harvest", str(k["ws"]), "--kind", kind, "--prompt-set", "flywheel/D1", "--out", str(path), "--k", "0"]
    if kind == "sft":
        args += ["--target", "student-r0-sft", "--selection", "all"]
    else:
        args += ["--models", "student-r0-sft,ref-4shot", "--selection", "all"]
    res = arena(*args)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(path)
    if path.suffix == ".jsonl":
        ds = load_dataset("json", data_files=str(path), split="train")
        assert ds.num_rows == 9 and "messages" in ds.column_names and "source_model" in ds.column_names
    elif path.suffix == ".parquet":
        ds = load_dataset("parquet", data_files=str(path), split="train")
        assert {"prompt", "chosen", "rejected", "margin", "chosen_model"} <= set(ds.column_names)
    else:
        ds = load_from_disk(str(path))
        assert "margin" in ds.column_names and ds.num_rows == 9


def test_harvest_errors_are_clear(tmp_path):
    from arena_learning.store import Store

    with Store(tmp_path / "ws"):
        pass
    res = arena("harvest", tmp_path / "ws", "--kind", "sft")
    assert res.returncode == 2 and "no prompt set 'test'" in res.stderr
    res = arena("harvest", tmp_path / "ws", "--kind", "ppo")
    assert res.returncode == 2 and "use sft, dpo or rm" in res.stderr


# ---- a user's flywheel mistakes: clear errors (exit 2) before anything runs --------------------------


@pytest.mark.parametrize("override,message", [
    ("pool.D0.seed=0", "pool.D0.seed: 0 is the test set's seed (tasks.seed)"),
    ("tasks.seed=1000", "pool.D0.seed: 1000 (its default, 1000 + its position 0) is the test set's seed"),
    ("pool.D1.categories=[arithmetic, nope]", "pool.D1.categories: Value error, unknown task categories ['nope']"),
])
def test_a_slice_that_would_train_on_test_prompts_or_nothing_is_refused_when_the_config_loads(tmp_path, override,
                                                                                               message):
    from typer.testing import CliRunner

    from arena_learning.cli import app

    data = json.loads(json.dumps(CONFIG))
    del data["pool"]["D0"]["seed"]  # the default seed: 1000 + its position
    cfg = tmp_path / "fw.yaml"
    cfg.write_text(yaml.safe_dump(data))
    ws = tmp_path / "ws"
    for args in (["flywheel", str(cfg)], ["plan", str(cfg), "--flywheel"]):
        res = CliRunner().invoke(app, [*args, "-w", str(ws), "--set", override])
        assert res.exit_code == 2, res.output
        assert message in res.output and "Traceback" not in res.output
    assert not ws.exists()


def test_an_empty_stored_slice_is_a_clear_error_of_flywheel_and_plan(tmp_path):
    from typer.testing import CliRunner

    from arena_learning.cli import app

    cfg = tmp_path / "fw.yaml"
    cfg.write_text(yaml.safe_dump({**CONFIG, "pool": {"D0": {"set": "pool/D1"}, "D1": CONFIG["pool"]["D1"]}}))
    ws = tmp_path / "ws"
    res = CliRunner().invoke(app, ["plan", str(cfg), "-w", str(ws)])
    assert res.exit_code == 2 and "pool.D0.set: the prompt set 'pool/D1' is empty or missing in the workspace " \
                                  "(there is none yet)" in res.output, res.output
    res = CliRunner().invoke(app, ["flywheel", str(cfg), "-w", str(ws)])
    assert res.exit_code == 2 and f"pool.D0.set: the prompt set 'pool/D1' is empty or missing in the workspace {ws}" \
        in res.output, res.output
    assert "arena pool build" in res.output


def test_a_stored_slice_loses_its_near_copies_of_every_test_set_in_the_workspace(tmp_path):
    from collections import Counter

    from arena_learning.flywheel.slices import slice_prompts
    from arena_learning.records import Prompt
    from arena_learning.store import Store

    question = ("Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural "
                "experiences and must-see attractions.")
    long_test = ("Explain, in a way that a curious twelve year old could follow, why the sky looks blue during the "
                 "day and turns red and orange when the sun sets over the ocean.")
    pool = [Prompt(id="copy", turns=[question.replace("engaging", "engaging,").lower()]),  # a near-copy: MinHash
            Prompt(id="pasted", turns=["Please help me. " + long_test.replace("ocean.", "ocean, with examples.")
                                       + " Then also write me a short poem about autumn leaves falling slowly."]),
            # a paraphrase: other words, the same request; only the embedding test sees it (cosine 0.91)
            Prompt(id="paraphrase", turns=["Write a fun travel blog entry about a trip I just took to Hawaii, covering "
                                           "the culture and the sights nobody should miss."]),
            Prompt(id="clean", turns=["Write a haiku about a lighthouse in winter."])]
    cfg = config(pool={"D0": {"set": "pool/D0"}, "D1": CONFIG["pool"]["D1"]})
    with Store(tmp_path / "ws") as store:
        store.put_prompts("pool/D0", pool)
        # a test set the pool was not built against: added to the workspace later (another test set, not the run's)
        store.put_prompts("testset/later", [Prompt(id="t1", turns=[question]), Prompt(id="t2", turns=[long_test])])
        near: dict[str, Counter[str]] = {}
        slices = slice_prompts(cfg, [], store, near)
    prompts, dropped = slices["D0"]
    assert [p.id for p in prompts] == ["clean"] and dropped == 3
    assert near == {"D0": Counter({"contaminated_minhash": 1, "contaminated_ngram": 1, "contaminated_embedding": 1})}
    assert "D1" not in near  # task slices: exact-disjoint by construction, near-copy tests do not apply
    with Store(tmp_path / "ws") as store:  # the paraphrase test off: the paraphrase stays
        off = config(pool={"D0": {"set": "pool/D0"}, "D1": CONFIG["pool"]["D1"]},
                     decontam={"embedding_threshold": None})
        assert [p.id for p in slice_prompts(off, [], store)["D0"][0]] == ["paraphrase", "clean"]
        assert "decontam" in off.model_dump() and "decontam" not in cfg.model_dump()  # written only when changed


def test_a_slice_is_checked_only_against_the_test_items_the_pool_build_did_not_check_it_against(tmp_path):
    from collections import Counter

    from arena_learning.curate.decontam import CHECKED_META, checked_record, near_copy_fingerprint
    from arena_learning.flywheel.slices import slice_prompts
    from arena_learning.records import Prompt
    from arena_learning.store import Store

    question = ("Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural "
                "experiences and must-see attractions.")
    long_test = ("Explain, in a way that a curious twelve year old could follow, why the sky looks blue during the "
                 "day and turns red and orange when the sun sets over the ocean.")
    pool = [Prompt(id="copy", turns=[question.replace("engaging", "engaging,").lower()]),
            Prompt(id="pasted", turns=["Please help me. " + long_test + " Then a poem about autumn leaves."]),
            Prompt(id="clean", turns=["Write a haiku about a lighthouse in winter."])]
    tests = [Prompt(id="t1", turns=[question]), Prompt(id="t2", turns=[long_test])]
    cfg = config(pool={"D0": {"set": "pool/D0"}, "D1": CONFIG["pool"]["D1"]})
    fingerprint = near_copy_fingerprint(cfg.decontam, cfg.decontam.embed)

    def kept(store, c=cfg):
        near: dict[str, Counter[str]] = {}
        return [p.id for p in slice_prompts(c, [], store, near)["D0"][0]], near.get("D0")

    with Store(tmp_path / "ws") as store:
        store.put_prompts("pool/D0", pool)
        store.put_prompts("testset/mix", tests)
        # The build checked pool/D0 against t1 with these settings (so its copy would be gone): only t2 is left.
        store.set_meta(CHECKED_META, checked_record(fingerprint, tests[:1], {"pool/D0": pool}))
        assert kept(store) == (["copy", "clean"], Counter({"contaminated_minhash": 1}))
        # Against both: nothing is checked again, nothing embedded.
        store.set_meta(CHECKED_META, checked_record(fingerprint, tests, {"pool/D0": pool}))
        assert kept(store) == (["copy", "pasted", "clean"], None)
        # Other settings than the build's, or a set changed since: every test item is checked.
        strict = config(pool={"D0": {"set": "pool/D0"}, "D1": CONFIG["pool"]["D1"]}, decontam={"threshold": 0.8})
        assert kept(store, strict)[0] == ["clean"]
        store.put_prompts("pool/D0", [*pool, Prompt(id="new", turns=["Name three rivers of Europe."])])
        assert kept(store)[0] == ["clean", "new"]


@pytest.mark.slow
def test_arena_info_traces_a_trained_example_back_to_its_battles(killed_and_resumed):
    from typer.testing import CliRunner

    from arena_learning.cli import app
    from arena_learning.flywheel.export import read_items

    ws = killed_and_resumed["ws"]
    item = read_items(ws / "flywheel" / "round-1" / "0-sft" / "sft.jsonl")[0]
    res = CliRunner().invoke(app, ["info", str(ws), "--example", item.prompt_id, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["prompt"] and any(e["stage"] == "round-1/0-sft" and e["models"] == [item.source_model]
                                  for e in data["examples"])
    assert {b["set"] for b in data["battles"]} == {"flywheel/D1"} and all(b["judge"] == "verifier"
                                                                          for b in data["battles"])
    assert any(item.source_model in (b["model_a"], b["model_b"]) for b in data["battles"])
    assert data["games"] and all(g["explanation"] for g in data["games"])
    table = CliRunner().invoke(app, ["info", str(ws), "--example", item.prompt_id])
    assert table.exit_code == 0 and "the battles behind it" in table.stdout
    missing = CliRunner().invoke(app, ["info", str(ws), "--example", "nope"])
    assert missing.exit_code == 2 and "no harvested example" in missing.output


@pytest.mark.slow
def test_a_sweep_trains_variants_beside_a_finished_stage_from_the_same_model_on_the_same_data(killed_and_resumed):
    """Run after the module's other tests: a sweep on round 1 added to the finished workspace."""
    k = killed_and_resumed
    data = json.loads(json.dumps(CONFIG))
    data["training"]["sft"]["max_steps"] = 6  # the first runs' --set: the main stages' inputs unchanged
    data["training"]["sft"]["save_steps"] = 2
    # "base": ReST-EM's start, the untrained target at a learning rate that leaves it as it was
    data["rounds"][1]["stages"][0]["sweep"] = {"lr1e-3": {"learning_rate": 1e-3, "max_steps": 1},
                                               "base": {"start": "base", "learning_rate": 1e-12, "max_steps": 1}}
    cfg_path = k["tmp"] / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(data))
    res = arena("flywheel", cfg_path, "-w", k["ws"], "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "r0.0-sft: done in an earlier run" in res.stderr and "r1.0-sft: done in an earlier run" in res.stderr
    assert "sweep lr1e-3: {'learning_rate': 0.001, 'max_steps': 1}" in res.stderr
    state = load_state(state_path(k["ws"]))
    main, var = state.stages["r1.0-sft"], state.stages["r1.0-sft-lr1e-3"]
    assert var.status == "done" and var.train.steps == 1 and main.train.steps == 6
    assert var.selection == main.selection == "all" and var.ablation == "lr1e-3"
    assert var.trained_on == main.trained_on == 15 and var.examples == main.examples  # the main stage's data
    assert (k["ws"] / "flywheel" / "round-1" / "0-sft-lr1e-3" / "model").is_dir()
    assert "r1.0-sft-base: training the untrained target (bundled) on 15 examples" in res.stderr
    # from the base, not from round 0's model: its weights are the untrained target's, round 0's are not
    from safetensors.numpy import load_file

    from arena_learning.engines.transformers_engine import resolve_hf_folder

    def weights(folder: Path) -> dict:
        return load_file(str(next(folder.glob("*.safetensors"))))

    base, r0 = weights(resolve_hf_folder("bundled")), weights(k["ws"] / "flywheel" / "round-0" / "0-sft" / "model")
    var_w = weights(k["ws"] / "flywheel" / "round-1" / "0-sft-base" / "model")
    name = next(n for n in r0 if "q_proj" in n and abs(r0[n] - base[n]).max() > 0)
    assert abs(var_w[name] - base[name]).max() < abs(r0[name] - base[name]).max() / 100
    out = json.loads(res.stdout)
    row = {a["key"]: a for a in out["ablations"]}["r1.0-sft-lr1e-3"]
    assert row["sweep"] == {"learning_rate": 0.001, "max_steps": 1} and row["model"] == "student-r1-sft-lr1e-3"
    assert row["rating"] is not None and row["delta_prev"]["vs"] == "student-r0-sft"  # rated, from the same start
    assert [r["model"] for r in out["rounds"]] == ["student-r0-sft", "student-r1-sft"]  # the chain is unchanged
    table = arena("flywheel", cfg_path, "-w", k["ws"])
    assert table.returncode == 0 and "learning_rate=0.001 max_steps=1" in table.stdout
