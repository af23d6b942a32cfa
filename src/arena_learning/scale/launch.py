"""Launching a training stage as its own process: Accelerate (DeepSpeed ZeRO-2/3, plain multi-GPU) or torchrun.

The flywheel trains in its own process by default (``launcher: inprocess``). With ``accelerate`` or
``torchrun`` the round runner writes the stage's job (``STAGE/job.json``: what to train, on which
data, from which model, with which settings) and runs the command :func:`launch_command` gives,
which starts ``python -m arena_learning.flywheel.train_stage --spec STAGE/job.json`` once per
process. The trainers are TRL's, so DeepSpeed and DDP come from Accelerate as TRL uses them; the
saved model is gathered from every rank before LoRA is merged (ZeRO-3 shards the weights).

Shipped Accelerate configs (``accelerate_configs/``, from TRL's): ``zero2``, ``zero3`` (DeepSpeed,
which must be installed on the GPU machine) and ``multi_gpu`` (DDP). ``num_processes`` and
``mixed_precision`` come from the flywheel config and override the file's.
"""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, model_validator

from ..config import Section
from ..errors import ArenaError, ConfigError

STAGE_MODULE = "arena_learning.flywheel.train_stage"
"""The entry point every launched process runs."""

SHIPPED = ("zero2", "zero3", "multi_gpu")
"""The Accelerate configs that ship in ``scale/accelerate_configs/``."""


class LaunchError(ArenaError):
    """A launched training process failed, or cannot be launched here."""


class LaunchSettings(Section):
    """How the flywheel's training stages run: in the flywheel's process, or launched on several processes."""

    launcher: Literal["inprocess", "accelerate", "torchrun"] = Field(
        "inprocess", description="inprocess (the default: train inside `arena flywheel`), accelerate (accelerate "
        "launch with accelerate_config) or torchrun")
    accelerate_config: str = Field("multi_gpu", description="zero2, zero3 (DeepSpeed ZeRO), multi_gpu (DDP), or the "
                                   "path of your own Accelerate config YAML")
    num_processes: int = Field(1, ge=1, description="processes (GPUs) per stage")
    mixed_precision: Literal["no", "bf16", "fp16"] = Field(
        "no", description="launched stages: the trainer's mixed precision (bf16 on GPUs that have it); no: float32, "
        "as in-process training")
    cpu: bool = Field(False, description="accelerate: train on the CPU (--cpu); a check that the launch works "
                      "where there is no GPU")
    main_process_port: int | None = Field(None, ge=1, le=65535, description="rendezvous port (default: the "
                                          "launcher's, 29500)")
    extra_args: list[str] = Field(default_factory=list, description="more launcher arguments, put before the "
                                  "module (e.g. ['--num_machines', '2', '--machine_rank', '0'])")

    @model_validator(mode="after")
    def _check(self) -> LaunchSettings:
        if self.launcher == "accelerate" and self.cpu and uses_deepspeed(self):
            raise ValueError(f"launch: accelerate_config {self.accelerate_config!r} is DeepSpeed, which needs GPUs; "
                             f"with cpu: true use multi_gpu (or your own config)")
        return self


def accelerate_config_path(name: str) -> Path:
    """Return the Accelerate config YAML ``name`` stands for: a shipped one (zero2, zero3, multi_gpu) or a path."""
    if name in SHIPPED:
        return Path(str(resources.files("arena_learning") / "scale" / "accelerate_configs" / f"{name}.yaml"))
    path = Path(name).expanduser()
    if not path.is_file():
        raise ConfigError(f"launch.accelerate_config {name!r}: neither a shipped config ({', '.join(SHIPPED)}) nor "
                          f"an existing YAML file")
    return path


def uses_deepspeed(settings: LaunchSettings) -> bool:
    """Return whether the stage's Accelerate config runs DeepSpeed."""
    if settings.launcher != "accelerate":
        return False
    path = accelerate_config_path(settings.accelerate_config)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"launch.accelerate_config {path}: not a readable YAML file ({err})") from None
    return isinstance(data, dict) and str(data.get("distributed_type", "")).upper() == "DEEPSPEED"


def _tool(name: str, module: str) -> list[str]:
    """Return the argv prefix of a launcher: its script beside this Python, else ``python -m module``."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.is_file() else [sys.executable, "-m", module]


def launch_command(settings: LaunchSettings, job_file: str | Path) -> list[str]:
    """Return the argv that trains the stage whose job is ``job_file`` (the plain module run when in-process)."""
    stage = ["-m", STAGE_MODULE, "--spec", str(job_file)]
    if settings.launcher == "accelerate":
        cmd = [*_tool("accelerate", "accelerate.commands.accelerate_cli"), "launch", "--config_file",
               str(accelerate_config_path(settings.accelerate_config)), "--num_processes", str(settings.num_processes),
               "--mixed_precision", settings.mixed_precision]
        if settings.cpu:
            cmd.append("--cpu")
        if settings.main_process_port is not None:
            cmd += ["--main_process_port", str(settings.main_process_port)]
        return [*cmd, *settings.extra_args, *stage]
    if settings.launcher == "torchrun":
        cmd = [*_tool("torchrun", "torch.distributed.run"), "--nproc_per_node", str(settings.num_processes)]
        if settings.main_process_port is not None:
            cmd += ["--master_port", str(settings.main_process_port)]
        return [*cmd, *settings.extra_args, *stage]
    return [sys.executable, *stage]


def shell_line(argv: Sequence[str]) -> str:
    """Return ``argv`` as one line a shell runs as it is."""
    return shlex.join(list(argv))


def check_launchable(settings: LaunchSettings) -> None:
    """Raise LaunchError when the launch cannot work here (DeepSpeed configs without deepspeed installed)."""
    if uses_deepspeed(settings) and importlib.util.find_spec("deepspeed") is None:
        raise LaunchError(f"launch.accelerate_config {settings.accelerate_config!r} runs DeepSpeed, which is not "
                          f"installed: `pip install deepspeed` on the GPU machine (or use multi_gpu); "
                          f"`arena flywheel CONFIG --print-launch` shows the commands without running them")


def run_launch(argv: Sequence[str], log_file: str | Path, *, echo: bool = True) -> None:
    """Run ``argv``, its output into ``log_file`` (and stderr when ``echo``); raise LaunchError with the log's tail
    if it fails."""
    log = Path(log_file)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as fh:
        fh.write(f"$ {shell_line(argv)}\n")
        fh.flush()
        with subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              text=True, errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:  # the trainers' progress, as it comes (stdout stays for results)
                fh.write(line)
                if echo:
                    sys.stderr.write(line)
        code = proc.returncode
    if code != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise LaunchError(f"the training launch failed (exit {code}); its log is {log}; last lines:\n"
                          f"{tail}\ncommand: {shell_line(argv)}")
