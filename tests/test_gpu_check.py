"""benchmarks/gpu_check.py: the GPU run's flywheel is a valid config, the CUDA sizes are what the check promises.

The run itself needs a GPU (the device tool) or, for ``--dry-run``, minutes of CPU training; both are run by
hand (see the script's docstring). Here: what the script would hand to ``arena flywheel``, validated by the
real loader, and the plan of what it trains.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from arena_learning.config import validate_config
from arena_learning.flywheel.settings import FlywheelConfig

ROOT = Path(__file__).resolve().parents[1]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_gpu_checks_flywheel_config_loads_and_trains_every_stage_in_full(dry_run):
    cfg = validate_config(gpu_check().flywheel_config(dry_run), FlywheelConfig, "gpu_check")
    stages = [s.kind for r in cfg.rounds for s in r.stages]
    assert stages == ["sft", "sft", "dpo", "rl"] and cfg.evaluate == "stages"
    assert all(getattr(cfg.training, k).lora is None for k in ("sft", "dpo", "rm", "rl"))  # full fine-tuning
    assert cfg.training.launch.launcher == "accelerate"
    assert {m.engine for m in [cfg.target, *cfg.references]} == {"transformers"}  # no llama.cpp on the GPU machine
    assert cfg.training.serve_as == "transformers"  # nor for the trained student (the quickstart serves it by GGUF)
    if dry_run:
        assert cfg.training.launch.cpu and cfg.tasks.n < 30
        assert all(getattr(cfg.training, k).max_steps == 1 for k in ("sft", "dpo", "rm", "rl"))
    else:
        assert cfg.training.launch.mixed_precision == "bf16" and not cfg.training.launch.cpu
        assert cfg.target.dtype == "bfloat16" and cfg.tasks.n == 270
        assert all(cfg.pool[s].n == 320 for s in ("D1", "D2", "D3"))
