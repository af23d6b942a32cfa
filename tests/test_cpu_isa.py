"""torch's CPU kernels pinned to AVX2 (``cpu_isa``): the weights a machine trains do not depend on AVX-512."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena_learning.cpu_isa import OPT_OUT, PINNED, pin_cpu_isa

from .conftest import load_benchmark

X86_AVX2 = "avx2" in Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else False
CLEAN = {k: v for k, v in os.environ.items() if k not in (*PINNED, OPT_OUT, "MKL_ENABLE_INSTRUCTIONS")}


def test_the_pin_sets_each_librarys_switch_unless_the_user_did_or_opted_out():
    env: dict[str, str] = {"MKL_CBWR": "AUTO"}
    added = pin_cpu_isa(env)
    if not added:  # not x86-64: nothing to pin
        assert env == {"MKL_CBWR": "AUTO"}
        return
    assert env == {**PINNED, "MKL_CBWR": "AUTO"} and "MKL_CBWR" not in added  # the user's value stays
    native = {OPT_OUT: "native"}
    assert pin_cpu_isa(native) == {} and native == {OPT_OUT: "native"}


def capability(env: dict[str, str], first: str = "") -> str:
    code = f"{first}import arena_learning, torch; print(torch.backends.cpu.get_cpu_capability())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@pytest.mark.skipif(not X86_AVX2, reason="the pin is for x86-64 CPUs with AVX2")
def test_importing_the_package_pins_torchs_kernels_even_after_torch_was_imported():
    assert capability(CLEAN) == "AVX2"
    assert capability(CLEAN, first="import torch; ") == "AVX2"  # torch reads it at its first kernel, not import
    assert capability({**CLEAN, "ATEN_CPU_CAPABILITY": "default"}) == "DEFAULT"  # the user's own choice wins


@pytest.mark.slow
@pytest.mark.skipif(not X86_AVX2, reason="the pin is for x86-64 CPUs with AVX2")
def test_a_training_step_under_the_pin_trains_an_avx2_only_machines_weights(tmp_path):
    # This machine (AVX-512 here; CI's may differ) under the pin, and the same step told that the CPU has no more
    # than AVX2 (every library's switch set by hand, as on an AVX2-only machine): the same weights. Without the pin
    # an AVX-512 machine trains others (benchmarks/bench_cpu_isa.py: weights differ after 3 steps).
    bench = load_benchmark("bench_cpu_isa")

    def train(env: dict[str, str], name: str) -> dict:
        out = tmp_path / f"{name}.json"
        subprocess.run([sys.executable, bench.__file__, "--steps", "1", "--child", str(out)], env=env, check=True,
                       capture_output=True)
        return json.loads(out.read_text())

    pinned = train(CLEAN, "pinned")
    avx2_only = train({**CLEAN, **PINNED, "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "avx2")
    assert pinned["capability"] == avx2_only["capability"] == "AVX2"
    assert pinned["hash"] == avx2_only["hash"]
