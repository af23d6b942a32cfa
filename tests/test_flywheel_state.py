"""The flywheel's state as records: written and read whole; a state of the layout before records is migrated, others
refused."""

from __future__ import annotations

import json

import pytest

from arena_learning.errors import ArenaError
from arena_learning.flywheel_state import (
    EVIDENCE_KEYS,
    STATE_VERSION,
    Delta,
    FlywheelState,
    StageRecord,
    TrainSummary,
    load_state,
    save_state,
    state_path,
)
from arena_learning.records import ExactAnswers, ExactCount

TRAIN = {"kind": "sft", "model_dir": "/ws/flywheel/round-0/0-sft/model", "examples": 6, "steps": 2, "seconds": 31.52,
         "train_loss": 2.4125, "s_per_step": 15.76, "peak_rss_mb": 2210.4, "resumed_from": None}
RATING = {"rating": 1012.3456, "ci_low": 980.5, "ci_high": 1040.25, "rank": 1, "rank_ci": 1, "wins": 5, "losses": 3,
          "ties": 1, "battles": 9}


def v1_stage(key: str, ablation: str | None, status: str = "done") -> dict:
    """A stage as `run_stage` wrote it before records: every key it set, the count key of its kind included."""
    rec = {"key": key, "round": 0, "stage": 0, "kind": "sft", "slice": "D0", "selection": ablation or "all",
           "ablation": ablation, "model": "student-r0-sft" + (f"-{ablation}" if ablation else ""),
           "fingerprint": "0123456789abcdef", "status": status,
           "seconds": {"answer_battle": 12.3, "harvest": 0.05}, "harvested": True,
           "by_model": {"ref-4shot": 4, "student-base": 2}, "sft_examples": 6, "examples": 6}
    if status == "done":
        rec["seconds"]["train"] = 31.6
        rec.update(train=TRAIN, train_loss=2.4125)
    return rec


def v1_row(rec: dict, rating: dict | None) -> dict:
    """The stage's row in the last report, as `Flywheel.report` made it before records."""
    tr = rec.get("train") or {}
    return {"key": rec["key"], "round": rec["round"], "kind": rec["kind"], "slice": rec["slice"],
            "selection": rec["selection"], "model": rec["model"], "status": rec["status"],
            "examples": rec.get("examples", 0), "trained_on": rec.get("trained_on", rec.get("examples", 0)),
            "by_model": rec.get("by_model", {}), "train_loss": rec.get("train_loss"), "steps": tr.get("steps"),
            "s_per_step": tr.get("s_per_step"), "seconds": rec.get("seconds", {}), "peak_rss_mb": tr.get("peak_rss_mb"),
            **(rating or {"rating": None, "ci_low": None, "ci_high": None})}


def v1_state() -> dict:
    main, variant = v1_stage("r0.0-sft", None), v1_stage("r0.0-sft-random", "random", status="skipped")
    rated = {"rating": 1012.35, "ci_low": 980.5, "ci_high": 1040.25}
    return {
        "stages": {"r0.0-sft": main, "r0.0-sft-random": variant},
        "evaluations": [{"after": "round 0 stage 0 (sft)", "seconds": 40.2,
                         "ratings": [{"model": "student-r0-sft", **RATING}]}],
        "slices": {"D0": {"prompts": 6, "dropped_as_test": 0}},
        "answered": {"flywheel/D0": {"student-base": "aaaa", "ref-4shot": "bbbb"}},
        "last_report": {
            "rounds": [{"round": 0, "model": "student-r0-sft", **rated, "sft_examples": 6, "dpo_pairs": 0,
                        "rm_pairs": 0, "train_loss": 2.4125, "stages": ["sft"],
                        "by_model": {"r0.0-sft": main["by_model"]}}],
            "references": [{"model": "ref-4shot", "rating": 990.0, "ci_low": 960.0, "ci_high": 1020.0}],
            "base": None, "stages": [v1_row(main, rated)], "ablations": [v1_row(variant, None)]},
        "runs": [{"seconds": 95.3, "trained": True, "finished": "2026-11-30 10:00:00"}],
    }


def test_a_state_of_the_layout_before_records_is_migrated_to_the_same_numbers(tmp_path):
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    old = v1_state()
    path.write_text(json.dumps(old, indent=1))
    state = load_state(path)
    assert state.version == STATE_VERSION == 2
    main = state.stages["r0.0-sft"]
    assert main.status == "done" and main.examples == 6 and main.by_model == {"ref-4shot": 4, "student-base": 2}
    assert main.train == TrainSummary(**TRAIN) and main.seconds.train == 31.6 and main.seconds.harvest == 0.05
    # the rating a stage had only in the last report's rows is now in its record
    assert (main.rating, main.ci_low, main.ci_high) == (1012.35, 980.5, 1040.25)
    assert state.stages["r0.0-sft-random"].status == "skipped" and state.stages["r0.0-sft-random"].rating is None
    # each stage's row of `arena flywheel --json` is what the old report wrote, key for key, and the paired
    # statistics and verbosity fields added since are None (an old state has none to show)
    for rec, old_row in ((main, old["last_report"]["stages"][0]),
                         (state.stages["r0.0-sft-random"], old["last_report"]["ablations"][0])):
        row = rec.row()
        assert {k: row[k] for k in old_row} == old_row
        assert set(row) - set(old_row) == set(EVIDENCE_KEYS) and all(row[k] is None for k in EVIDENCE_KEYS)
    assert state.evaluations[0].ratings[0].rating == RATING["rating"] and state.evaluations[0].seconds == 40.2
    assert state.slices["D0"].prompts == 6 and state.answered["flywheel/D0"]["ref-4shot"] == "bbbb"
    table = state.last_report
    assert table is not None and table.base is None and table.references[0].ci_high == 1020.0
    old_round = old["last_report"]["rounds"][0]
    assert table.rounds[0].model_dump(exclude=set(EVIDENCE_KEYS)) == old_round
    assert table.rounds[0].delta_prev is None and table.rounds[0].exact is None
    assert state.runs[0].trained and state.runs[0].seconds == 95.3
    # written whole in the new layout, read back the same
    save_state(state, path)
    assert json.loads(path.read_text())["version"] == 2
    assert load_state(path) == state
    assert not list(path.parent.glob(".state.json.tmp*"))  # the write left no temporary file


def test_a_version_2_state_written_before_the_paired_statistics_loads_and_keeps_them_once_set(tmp_path):
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    rated = {"model": "student-r0-sft", "rating": 1012.35, "ci_low": 980.5, "ci_high": 1040.25}
    before = {"version": 2, "stages": {"r0.0-sft": {"key": "r0.0-sft", "round": 0, "kind": "sft", "status": "done",
                                                     **{k: rated[k] for k in ("rating", "ci_low", "ci_high")}}},
              "last_report": {"rounds": [{"round": 0, **rated}], "references": [{"model": "ref", "rating": 990.0}],
                              "base": None}}
    path.write_text(json.dumps(before))
    state = load_state(path)
    assert state.stages["r0.0-sft"].delta_prev is None and state.last_report.rounds[0].exact is None
    assert state.last_report.references[0].mean_chars is None
    row = state.last_report.rounds[0]
    row.delta_prev = Delta(vs="student-base", rating=25.5, ci_low=10.0, ci_high=41.0, p_better=1.0)
    row.exact = ExactAnswers(n=70, of=90, gained=9, lost=2, vs="student-base",
                             per_category={"arithmetic": ExactCount(n=5, of=10, gained=1, lost=0)})
    row.mean_chars, row.style_rating = 12.25, 1008.5
    save_state(state, path)
    back = load_state(path)
    assert back == state and back.last_report.rounds[0].exact.per_category["arithmetic"].gained == 1


def test_no_state_file_is_a_fresh_state_and_a_record_round_trips(tmp_path):
    path = state_path(tmp_path)
    assert load_state(path) == FlywheelState()
    path.parent.mkdir(parents=True)
    state = FlywheelState()
    state.stages["r0.0-dpo"] = StageRecord(key="r0.0-dpo", round=0, kind="dpo", slice="D0")
    state.stages["r0.0-dpo"].seconds.answer_battle = 3.5
    save_state(state, path)
    back = load_state(path)
    assert back.stages["r0.0-dpo"].seconds.spent() == {"answer_battle": 3.5}
    assert back.stages["r0.0-dpo"].row()["trained_on"] == 0 and back == state


@pytest.mark.parametrize("text,message", [
    ('{"version": 3, "stages": {}}', r"newer arena-learning \(state version 3; this one reads up to 2\)"),
    ("{not json", "cannot be read as JSON"),
    ("[1, 2]", "holds a list, not a flywheel state"),
    ('{"stages": {}, "rounds_done": 3}', r"unknown keys \(rounds_done\)"),
    ('{"version": 2, "stages": {"r0.0-sft": {"key": "r0.0-sft", "round": 0, "kind": "ppo"}}}',
     r"not a valid flywheel state \(stages\.r0\.0-sft\.kind"),
])
def test_a_state_this_version_cannot_read_is_refused_with_what_to_do(tmp_path, text, message):
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(ArenaError, match=message):
        load_state(path)
    if "newer" not in message:
        with pytest.raises(ArenaError, match="move it away to start the flywheel's bookkeeping afresh"):
            load_state(path)


# A finished stage's done file as the code before the one training record wrote it (TrainResult.summary()).
OLD_DONE = ('{"kind": "dpo", "model_dir": "/ws/flywheel/round-1/0-dpo/model", "examples": 48, "steps": 6, '
            '"seconds": 41.24, "train_loss": 0.6931, "s_per_step": 6.87, "peak_rss_mb": 2519.5, '
            '"resumed_from": "/ws/flywheel/round-1/0-dpo/work/checkpoint-4"}')


def test_a_done_file_and_a_state_written_before_the_one_training_record_load_and_are_written_alike(tmp_path):
    import json

    from arena_learning.flywheel import train

    stage = tmp_path / "moved" / "0-dpo"
    (stage / train.MODEL_DIR).mkdir(parents=True)
    (stage / train.MODEL_DIR / train.DONE_MARK).write_text(OLD_DONE)
    (stage / train.LOSSES).write_text(json.dumps({**json.loads(OLD_DONE), "done": True, "log": [{"loss": 0.69}]}))
    done = train.done_result(stage, "dpo")
    assert isinstance(done, TrainSummary) and done.reused and done.log == [{"loss": 0.69}]
    # where the stage is now, not where it was trained; nothing was resumed in this run
    assert done.model_dir == stage / train.MODEL_DIR and done.resumed_from is None
    assert (done.steps, done.seconds, done.peak_rss_mb) == (6, 41.24, 2519.5)
    # written back, the record has the old file's fields and values, and nothing of this run (reused, log)
    again = TrainSummary.model_validate_json(OLD_DONE)
    assert json.dumps(again.model_dump()) == OLD_DONE
    assert json.loads(done.model_dump_json()) == {**json.loads(OLD_DONE), "model_dir": str(stage / "model"),
                                                  "resumed_from": None}
    # in the flywheel state too
    state = FlywheelState.model_validate({"version": STATE_VERSION,
                                          "stages": {"r1.0-dpo": {"key": "r1.0-dpo", "round": 1, "kind": "dpo",
                                                                   "status": "done", "train": json.loads(OLD_DONE)}}})
    path = tmp_path / "state.json"
    save_state(state, path)
    assert json.loads(path.read_text())["stages"]["r1.0-dpo"]["train"] == json.loads(OLD_DONE)
    assert load_state(path).stages["r1.0-dpo"].train == again
