"""benchmarks/gpu_check.py: the GPU run's flywheel is a valid config, the CUDA sizes are what the check promises.

The run itself needs a GPU (the device tool). Here: what the script would hand to ``arena flywheel``, validated
by the real loader, (slow) ``run --dry-run`` on the CPU (probes and the run's plan), so the prepared check cannot
rot unseen (it once failed with an IndexError after the flywheel config it reads lost two of its references), and
the figures it reads from a finished run, read from the session's trained flywheel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
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


@pytest.mark.slow  # the probes load the bundled model through transformers
def test_the_dry_run_probes_answering_and_plans_every_stage_of_the_gpu_check_on_the_cpu(tmp_path):
    """`python benchmarks/gpu_check.py run --dry-run`: answering probes, then the flywheel's plan, SFT -> SFT -> DPO
    -> RL (the training itself is `--dry-run --train`, by hand: minutes)."""
    out, ws = tmp_path / "out", tmp_path / "ws"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "run", "--dry-run", "--out",
                           str(out), "--workspace", str(ws), "--timeout", "600"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    assert figures["dry_run"] and figures["exit_code"] == 0
    assert [a["model"] for a in figures["answering"]] == ["student", "gemma-270m-12shot"]
    assert all(a["tokens"] > 0 for a in figures["answering"])
    assert [p["model"] for p in figures["planned"]] == ["student-r0-sft", "student-r1-sft", "student-r1-dpo",
                                                         "student-r1-rl"]


@pytest.mark.slow  # the session's trained flywheel
def test_a_finished_runs_figures_are_read_from_its_report_and_workspace(trained_flywheel):
    figures = gpu_check().flywheel_figures(trained_flywheel.report, trained_flywheel.workspace)
    assert [(s["kind"], s["status"]) for s in figures["stages"]] == [("sft", "done")]
    steps = trained_flywheel.config["training"]["sft"]["max_steps"]
    assert all(s["steps"] == steps and s["rating"] is not None for s in figures["stages"])
    assert figures["rounds"] == trained_flywheel.report["rounds"] and figures["base"]
    assert set(figures["exact_answers"]) >= {"student-base", "ref-2shot", "student-r0-sft"}
    assert all(0 <= r["exact"] <= r["answered"] == 9 for r in figures["exact_answers"].values())
