"""Training tracked where teams look: TensorBoard, or W&B and MLflow in their offline modes.

``training.report_to`` is passed to TRL's trainers (``TrainingArguments.report_to``); transformers'
callbacks read where to write from the environment, which ``tracking`` sets for a stage's training
and puts back after: TensorBoard event files under ``WORKSPACE/tracking/tensorboard/RUN``, W&B with
``WANDB_MODE=offline`` under ``WORKSPACE/tracking`` (``wandb sync`` uploads it later, if ever), MLflow
in a file store, ``WORKSPACE/tracking/mlruns``. None of them makes a network call. Each stage's run is
named by its round and stage (``round-0/0-sft``), so runs line up with the round table.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ArenaError

TRACKERS: dict[str, tuple[str, ...]] = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",),
                                        "mlflow": ("mlflow",)}
"""Each tracker ``training.report_to`` names, and the packages that provide it (any one of them)."""

TRACKING_DIR = "tracking"
"""The workspace's folder of tracked runs."""


def check_tracker(report_to: str) -> None:
    """Raise an ArenaError that says what to install when ``report_to``'s package is missing (none: nothing)."""
    packages = TRACKERS.get(report_to)
    if packages is None or any(importlib.util.find_spec(p) is not None for p in packages):
        return
    raise ArenaError(f"training.report_to is {report_to!r}, but no {' or '.join(packages)} is installed: "
                     f"pip install {packages[-1] if report_to == 'tensorboard' else packages[0]} (or "
                     f"'arena-learning[tracking]' for TensorBoard), or set training.report_to: none")


def tracker_env(report_to: str, folder: Path, run_name: str, project: str) -> dict[str, str]:
    """Return the environment that sends ``report_to``'s run ``run_name`` to ``folder`` (WORKSPACE/tracking),
    offline: TensorBoard's log folder, W&B's offline mode, MLflow's file store."""
    folder = folder.resolve()
    if report_to == "tensorboard":
        return {"TENSORBOARD_LOGGING_DIR": str(folder / "tensorboard" / run_name)}
    if report_to == "wandb":
        return {"WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_PROJECT": project,
                "WANDB_NAME": run_name}
    if report_to == "mlflow":
        return {"MLFLOW_TRACKING_URI": (folder / "mlruns").as_uri(), "MLFLOW_EXPERIMENT_NAME": project,
                "MLFLOW_RUN_NAME": run_name}
    return {}


@contextmanager
def tracking(report_to: str, folder: Path | None, run_name: str | None, project: str = "arena-flywheel"
             ) -> Iterator[None]:
    """Within the block, the environment sends a trainer's reports to ``folder`` (see ``tracker_env``); what it
    held before is put back after. ``report_to`` none (or no folder): nothing changes."""
    if report_to == "none" or folder is None or run_name is None:
        yield
        return
    check_tracker(report_to)
    env = tracker_env(report_to, folder, run_name, project)
    if report_to == "tensorboard":
        Path(env["TENSORBOARD_LOGGING_DIR"]).mkdir(parents=True, exist_ok=True)
    else:
        folder.mkdir(parents=True, exist_ok=True)
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
