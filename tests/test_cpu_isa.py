"""torch's CPU kernels pinned to AVX2 (``cpu_isa``): the weights a machine trains do not depend on AVX-512."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena_learning.cpu_isa import OPT_OUT, PINNED, pin_cpu_isa

from .conftest import ARENA

ROOT = Path(__file__).resolve().parents[1]
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


def capability(env: dict[str, str], first: str = "", pin: bool = False) -> str:
    pinning = "from arena_learning.cpu_isa import pin_cpu_isa; pin_cpu_isa(); " if pin else ""
    code = f"{first}import arena_learning, torch; {pinning}print(torch.backends.cpu.get_cpu_capability())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def test_importing_the_package_changes_nothing_in_the_process():
    code = ("import os, json; before = dict(os.environ); import arena_learning, arena_learning.cli, "
            "arena_learning.pipeline; print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))")
    proc = subprocess.run([sys.executable, "-c", code], env=CLEAN, capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == {}


@pytest.mark.skipif(not X86_AVX2, reason="the pin is for x86-64 CPUs with AVX2")
def test_the_arena_command_pins_torchs_kernels_and_a_library_user_can_even_after_torch_was_imported():
    assert capability(CLEAN) != "AVX2" or "avx512f" not in Path("/proc/cpuinfo").read_text()  # no pin on import
    assert capability(CLEAN, pin=True) == "AVX2"
    assert capability(CLEAN, first="import torch; ", pin=True) == "AVX2"  # torch reads it at its first kernel
    assert capability({**CLEAN, "ATEN_CPU_CAPABILITY": "default"}, pin=True) == "DEFAULT"  # the user's choice wins
    # the command sets it in its own process, and so in every process it starts (training through accelerate)
    code = ("import os, sys; from arena_learning import __main__ as m; sys.argv = ['arena', '--help']; "
            "import atexit; atexit.register(lambda: print('ISA', os.environ.get('ATEN_CPU_CAPABILITY'))); m.main()")
    proc = subprocess.run([sys.executable, "-c", code], env=CLEAN, capture_output=True, text=True)
    assert "ISA avx2" in proc.stdout, proc.stdout + proc.stderr


# Every other library's kernel choice forced down to AVX2: MKL told the CPU has no more than AVX2, OpenBLAS (numpy's
# and scipy's BLAS) on its Haswell kernels, numpy's own SIMD loops without their AVX-512 targets. On an AVX-512
# machine this is another choice than each library's own; on an AVX2-only one it is the same.
FORCED_AVX2 = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
               "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}


def stage_fingerprint(ws: Path) -> dict:
    """The trained weights and their GGUF export (hashes), and every answer the workspace stored."""
    import hashlib

    from arena_learning.store import Store

    stage = ws / "flywheel" / "round-0" / "0-sft"
    out = {}
    for name, path in (("weights", stage / "model" / "model.safetensors"), ("gguf", stage / "model.gguf")):
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    with Store(ws, readonly=True) as store:
        out["answers"] = sorted((a.prompt_id, a.model, tuple(a.turns)) for a in store.get_answers())
    return out


@pytest.mark.slow
@pytest.mark.skipif(not X86_AVX2, reason="the pin is for x86-64 CPUs with AVX2")
def test_a_short_flywheel_under_two_kernel_choices_trains_the_same_weights_and_answers_the_same(trained_flywheel,
                                                                                                  tmp_path):
    """The session's flywheel (three LoRA steps through ``accelerate launch``, a GGUF export, answers through
    llama.cpp) as this machine's libraries choose their kernels, and again in a process with every kernel choice
    the pin leaves open forced down to AVX2 (``FORCED_AVX2``, and ATen/MKL/oneDNN as an AVX2-only machine has them):
    the same weights to the bit, the same GGUF and the same answers. The check is not blind: the same run with the
    pin off (``ARENA_CPU_ISA=native``) trains other weights on an AVX-512 machine (tried on 2026-12-06)."""
    ws = tmp_path / "ws"
    cfg = tmp_path / "flywheel.yaml"
    cfg.write_text((trained_flywheel.workspace.parent / "flywheel.yaml").read_text(encoding="utf-8"))
    proc = subprocess.run([*ARENA, "flywheel", str(cfg), "-w", str(ws), "--json"], capture_output=True, text=True,
                          env={**CLEAN, **FORCED_AVX2}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    forced, own = stage_fingerprint(ws), stage_fingerprint(trained_flywheel.workspace)
    assert forced["weights"] == own["weights"]
    assert forced["gguf"] == own["gguf"]
    assert forced["answers"] == own["answers"] and len(own["answers"]) > 9
    assert json.loads(proc.stdout)["rounds"] == trained_flywheel.report["rounds"]
