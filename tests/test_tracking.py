"""training.report_to: the flywheel's TRL trainers report to TensorBoard (event files a test reads back), or to
W&B and MLflow in their offline modes; the environment that points them at the workspace is put back after."""

from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path

import pytest

from arena_learning.config import validate_config
from arena_learning.errors import ArenaError
from arena_learning.flywheel import train
from arena_learning.flywheel.settings import SFTSettings, TrainingConfig
from arena_learning.flywheel.tracking import check_tracker, log_rounds, round_figures, tracker_env, tracking
from arena_learning.flywheel_state import Delta, RoundRow
from arena_learning.records import ExactAnswers

from .test_flywheel_train import TARGET, TINY, sft_items


def scalars(folder: Path) -> dict[str, list[float]]:
    """Return the scalars of every TensorBoard event file under ``folder`` (TFRecord framing: length, its CRC,
    the Event proto, its CRC), by tag."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[float]] = {}
    for path in folder.rglob("events.out.tfevents.*"):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (n,) = struct.unpack("<Q", data[at:at + 8])
            event = Event.FromString(data[at + 12:at + 12 + n])
            at += 12 + n + 4
            for value in event.summary.value:
                out.setdefault(value.tag, []).append(value.simple_value)
    return out


def test_report_to_defaults_to_none_and_reaches_the_trainers_arguments(tmp_path):
    assert TrainingConfig().report_to == "none" and "report_to" not in TrainingConfig().model_dump()
    args = train._common_args(SFTSettings(**TINY), tmp_path, 4)
    assert args["report_to"] == "none" and "run_name" not in args
    run = train.RunOptions(report_to="tensorboard", run_name="round-0/r0.0-sft")
    args = train._common_args(SFTSettings(**TINY), tmp_path, 4, run)
    assert (args["report_to"], args["run_name"]) == ("tensorboard", "round-0/r0.0-sft")
    from trl import SFTConfig

    built = SFTConfig(**args)  # TRL takes them as they are
    assert built.report_to == ["tensorboard"] and built.run_name == "round-0/r0.0-sft"
    with pytest.raises(ArenaError, match="report_to: Input should be .none., .tensorboard."):
        validate_config({"report_to": "comet"}, TrainingConfig)


def test_trackers_are_pointed_at_the_workspace_offline_and_the_environment_is_put_back(tmp_path, monkeypatch):
    wandb = tracker_env("wandb", tmp_path, "round-1/r1.0-dpo", "fw")
    assert wandb == {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path.resolve()), "WANDB_PROJECT": "fw",
                     "WANDB_NAME": "round-1/r1.0-dpo"}
    mlflow = tracker_env("mlflow", tmp_path, "round-1/r1.0-dpo", "fw")
    assert mlflow["MLFLOW_TRACKING_URI"] == (tmp_path.resolve() / "mlruns").as_uri()  # a file store
    assert mlflow["MLFLOW_TRACKING_URI"].startswith("file://") and mlflow["MLFLOW_EXPERIMENT_NAME"] == "fw"
    assert tracker_env("none", tmp_path, "x", "fw") == {}
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    with tracking("tensorboard", tmp_path / "tracking", "round-0/r0.0-sft"):
        assert os.environ["TENSORBOARD_LOGGING_DIR"] == str((tmp_path / "tracking/tensorboard/round-0/r0.0-sft")
                                                            .resolve())
    assert "TENSORBOARD_LOGGING_DIR" not in os.environ and os.environ["WANDB_MODE"] == "online"
    for name, package in (("wandb", "wandb"), ("mlflow", "mlflow")):
        if importlib.util.find_spec(package) is None:  # a missing package is named before any training
            with pytest.raises(ArenaError, match=f"pip install {package}"):
                check_tracker(name)
    check_tracker("none")


def test_the_round_table_is_logged_beside_the_losses_one_point_per_round(tmp_path):
    rows = [RoundRow(round=0, model="r0", rating=980.5, ci_low=970.0, ci_high=991.0, sft_examples=40, train_loss=1.25,
                     delta_prev=Delta(vs="base", rating=47.4), exact=ExactAnswers(n=45, of=90),
                     by_model={"r0.0-sft": {"teacher-a": 30, "teacher-b": 10}}),
            RoundRow(round=1, model="r1", rating=1010.0, dpo_pairs=12, by_model={"r1.0-dpo": {"teacher-a": 12}})]
    assert round_figures(rows[1]) == {"rating": 1010.0, "sft_examples": 0.0, "dpo_pairs": 12.0, "rm_pairs": 0.0,
                                      "data/teacher-a": 12.0}
    assert log_rounds("none", tmp_path, rows) is None and not (tmp_path / "tensorboard").exists()
    for _ in range(2):  # a later evaluation rewrites the table: one point per round, never appended again
        out = log_rounds("tensorboard", tmp_path, rows)
    assert out == tmp_path / "tensorboard" / "rounds"
    logged = scalars(out)
    assert logged["round/rating"] == [980.5, 1010.0] and logged["round/delta_prev"] == [pytest.approx(47.4)]
    assert logged["round/exact"] == [45.0] and logged["round/data/teacher-a"] == [30.0, 12.0]
    assert logged["round/data/teacher-b"] == [10.0] and logged["round/train_loss"] == [1.25]


@pytest.mark.slow
def test_a_short_sft_stage_writes_its_losses_to_tensorboard(tmp_path):
    run = train.RunOptions(report_to="tensorboard", run_name="round-0/r0.0-sft")
    with tracking("tensorboard", tmp_path / "tracking", run.run_name):
        res = train.train_sft("bundled", sft_items(), tmp_path / "sft", SFTSettings(**TINY), spec=TARGET, run=run)
    assert res.steps == 1
    logged = scalars(tmp_path / "tracking" / "tensorboard" / "round-0" / "r0.0-sft")
    assert logged["train/loss"] == [pytest.approx(res.log[0]["loss"], rel=1e-4)]
