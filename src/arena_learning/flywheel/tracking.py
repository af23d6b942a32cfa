"""Training tracked where teams look: TensorBoard, or W&B and MLflow in their offline modes.

``training.report_to`` is passed to TRL's trainers (``TrainingArguments.report_to``); transformers'
callbacks read where to write from the environment, which ``tracking`` sets for a stage's training
and puts back after: TensorBoard event files under ``WORKSPACE/tracking/tensorboard/RUN``, W&B with
``WANDB_MODE=offline`` under ``WORKSPACE/tracking`` (``wandb sync`` uploads it later, if ever), MLflow
in a file store, ``WORKSPACE/tracking/mlruns``. None of them makes a network call. Each stage's run is
named by its round and stage (``round-0/0-sft``), so runs line up with the round table.

With TensorBoard, the round table itself is logged beside the losses (``log_rounds``), as the run
``rounds``: each round's rating and CI, paired deltas, exact answers, data harvested (in all and per
teacher) and last training loss, at step = round; rewritten whole after every evaluation, as the table
is. W&B and MLflow get each stage's losses only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ArenaError
from ..flywheel_state import RoundRow

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


def round_figures(row: RoundRow) -> dict[str, float]:
    """Return the round table's figures of ``row`` by tag (the ones it has: an unrated model has no rating)."""
    figures: dict[str, float | None] = {
        "rating": row.rating, "ci_low": row.ci_low, "ci_high": row.ci_high,
        "delta_prev": row.delta_prev.rating if row.delta_prev else None,
        "delta_base": row.delta_base.rating if row.delta_base else None,
        "delta_best_ref": row.delta_best_ref.rating if row.delta_best_ref else None,
        "exact": row.exact.n if row.exact else None, "sft_examples": row.sft_examples,
        "dpo_pairs": row.dpo_pairs, "rm_pairs": row.rm_pairs, "train_loss": row.train_loss}
    teachers: dict[str, int] = {}
    for per_model in row.by_model.values():
        for model, n in per_model.items():
            teachers[model] = teachers.get(model, 0) + n
    figures.update({f"data/{model}": n for model, n in sorted(teachers.items())})
    return {k: float(v) for k, v in figures.items() if v is not None}


def _summary_writer() -> Any:
    """Return the SummaryWriter class as transformers' TensorBoard callback picks it (torch's, else tensorboardX)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch's needs the tensorboard package
        import tensorboardX

        return tensorboardX.SummaryWriter
    return SummaryWriter


def log_rounds(report_to: str, folder: Path, rows: Sequence[RoundRow]) -> Path | None:
    """Write the round table ``rows`` to TensorBoard as the run ``rounds`` under ``folder`` (WORKSPACE/tracking),
    replacing what an earlier evaluation wrote; return its folder (None: ``report_to`` is not tensorboard)."""
    if report_to != "tensorboard" or not rows:
        return None
    check_tracker(report_to)
    out = folder / "tensorboard" / "rounds"
    shutil.rmtree(out, ignore_errors=True)  # the table is whole each time: its points are not appended again
    writer = _summary_writer()(log_dir=str(out))
    try:
        for row in rows:
            for tag, value in round_figures(row).items():
                writer.add_scalar(f"round/{tag}", value, global_step=row.round)
    finally:
        writer.close()
    return out
