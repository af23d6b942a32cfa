"""A training stage as its own process: ``python -m arena_learning.flywheel.train_stage --spec STAGE/job.json``.

The round runner writes the job (what to train, from which model folder, on which data file, with
which settings) and launches this module with ``accelerate launch``, ``torchrun`` or plain Python
(``scale.launch``); every process (rank) reads the same job and runs the same TRL trainer as
in-process training does, so a stage trains the same way however it is launched. The result is the
stage folder itself (``model/``, ``losses.json``): the runner reads it when the launch has exited.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..config import ModelSpec, Section, validate_config
from ..errors import ArenaError
from ..flywheel_state import TrainSummary
from ..records import Prompt
from . import train as training
from .export import read_items
from .kinds import train_kind
from .settings import DPOSettings, RLSettings, RMSettings, SFTSettings, TrainSettings
from .tracking import tracking

JOB_FILE = "job.json"
SETTINGS: dict[str, type[TrainSettings]] = {"sft": SFTSettings, "dpo": DPOSettings, "rm": RMSettings, "rl": RLSettings}


class StageJob(Section):
    """One launched training stage: everything its processes need, as a JSON file."""

    kind: Literal["sft", "dpo", "rm", "rl"]
    base: str = Field(description="the model folder trained from")
    stage: str = Field(description="the stage folder (model/, losses.json, work/ land there)")
    settings: dict[str, Any] = Field(description="the kind's settings (training.sft, .dpo, .rm or .rl)")
    target: ModelSpec = Field(description="how the target is asked (its prompt format renders the data)")
    data: str | None = Field(None, description="sft/dpo/rm: the harvested items (JSONL)")
    prompts: str | None = Field(None, description="rl: the prompts (JSONL of Prompt records)")
    reward_model: str | None = Field(None, description="rl with reward: model: the reward model folder")
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    cpu: bool = False
    report_to: Literal["none", "tensorboard", "wandb", "mlflow"] = "none"
    run_name: str | None = Field(None, description="the tracked run's name (report_to), its round and stage")
    tracking_dir: str | None = Field(None, description="the workspace's folder of tracked runs (report_to)")
    project: str = Field("arena-flywheel", description="the tracked runs' project (W&B) or experiment (MLflow)")


def write_job(job: StageJob, path: str | Path) -> Path:
    """Write ``job`` to ``path`` (JSON); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(job.model_dump_json(indent=1), encoding="utf-8")
    return path


def write_prompts(prompts: list[Prompt], path: str | Path) -> Path:
    """Write RL prompts as JSONL (one Prompt record a line); return the path."""
    path = Path(path)
    path.write_text("".join(p.model_dump_json() + "\n" for p in prompts), encoding="utf-8")
    return path


def read_job(path: str | Path) -> StageJob:
    """Return the job in ``path``; an ArenaError says what is wrong with it."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise ArenaError(f"stage job {p}: cannot read it ({err.strerror}); the round runner writes it") from None
    except ValueError as err:
        raise ArenaError(f"stage job {p}: not valid JSON ({err})") from None
    return validate_config(data, StageJob, str(p))


def run_job(job: StageJob) -> TrainSummary:
    """Train the stage ``job`` describes (on this rank); return what it did."""
    settings = validate_config(job.settings, SETTINGS[job.kind], f"the {job.kind} settings of {job.stage}")
    run = training.RunOptions(mixed_precision=job.mixed_precision, cpu=job.cpu, launched=True,
                              report_to=job.report_to, run_name=job.run_name)
    with tracking(job.report_to, Path(job.tracking_dir) if job.tracking_dir else None, job.run_name, job.project):
        return _train(job, settings, run)


def _train(job: StageJob, settings: Any, run: training.RunOptions) -> TrainSummary:
    kw: dict[str, Any] = {"spec": job.target, "run": run}
    kind = train_kind(job.kind)
    if kind.on_prompts:
        if job.prompts is None:
            raise ArenaError(f"stage job for {job.stage}: an rl stage needs prompts")
        lines = Path(job.prompts).read_text(encoding="utf-8").splitlines()
        prompts = [Prompt.model_validate_json(line) for line in lines if line.strip()]
        assert isinstance(settings, RLSettings)  # SETTINGS["rl"]
        return training.train_rl(job.base, prompts, job.stage, settings, reward_model=job.reward_model, **kw)
    if job.data is None:
        raise ArenaError(f"stage job for {job.stage}: a {job.kind} stage needs its data file")
    items = read_items(job.data)
    fn: Any = kind.trainer_fn()  # its settings' type follows the kind
    result: TrainSummary = fn(job.base, items, job.stage, settings, **kw)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m arena_learning.flywheel.train_stage",
                                     description="Train one flywheel stage from its job file (written by "
                                     "`arena flywheel`); run once per process by accelerate launch or torchrun.")
    parser.add_argument("--spec", required=True, help="the stage's job.json")
    args = parser.parse_args(argv)
    try:
        res = run_job(read_job(args.spec))
    except (ArenaError, training.NoTrainingData) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(res.model_dump()), file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover - run by the launchers
    sys.exit(main())
