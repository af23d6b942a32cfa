"""torch's CPU kernels pinned to AVX2 (``cpu_isa``): the weights a machine trains do not depend on AVX-512."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena_learning.cpu_isa import OPT_OUT, PINNED, pin_cpu_isa

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


def capability(env: dict[str, str], first: str = "") -> str:
    code = f"{first}import arena_learning, torch; print(torch.backends.cpu.get_cpu_capability())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@pytest.mark.skipif(not X86_AVX2, reason="the pin is for x86-64 CPUs with AVX2")
def test_importing_the_package_pins_torchs_kernels_even_after_torch_was_imported():
    assert capability(CLEAN) == "AVX2"
    assert capability(CLEAN, first="import torch; ") == "AVX2"  # torch reads it at its first kernel, not import
    assert capability({**CLEAN, "ATEN_CPU_CAPABILITY": "default"}) == "DEFAULT"  # the user's own choice wins


def train_one_step(out: str) -> None:
    """One SFT step of the flywheel's trainer on the bundled model (LoRA r 16, batch 8, fixed rows and seed); write
    torch's CPU capability and a hash of the trained weights to ``out``. Run in a process of its own: the kernel
    switches are read when the libraries start."""
    import hashlib
    import tempfile

    import torch

    from arena_learning.config import ModelSpec
    from arena_learning.engines.transformers_engine import bundled_hf_folder
    from arena_learning.flywheel import train
    from arena_learning.flywheel.harvest import SFTItem
    from arena_learning.flywheel.settings import LoraSettings, SFTSettings
    from arena_learning.tasks import generate_tasks

    target = ModelSpec(name="student", engine="transformers", model="bundled", mode="completion",
                       params={"max_tokens": 12, "stop": ["\n"]})
    sft = [SFTItem(messages=[{"role": "user", "content": p.turns[0]}, {"role": "assistant", "content": p.reference[0]}],
                   prompt_id=p.id) for p in generate_tasks(64, seed=11, suite=2)]
    settings = SFTSettings(epochs=1, max_steps=1, batch_size=8, micro_batch_size=8, max_length=64,
                           lora=LoraSettings(r=16, alpha=32), save_steps=1000, warmup_ratio=0.0, learning_rate=2e-4)
    with tempfile.TemporaryDirectory(prefix="isa-") as tmp:
        train.train_sft(bundled_hf_folder(), sft, Path(tmp) / "stage", settings, spec=target)
        digest = hashlib.sha256()
        for f in sorted((Path(tmp) / "stage" / "model").glob("*.safetensors")):
            digest.update(f.read_bytes())
    Path(out).write_text(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                                     "hash": digest.hexdigest()[:16]}))


@pytest.mark.slow
@pytest.mark.skipif(not X86_AVX2, reason="the pin is for x86-64 CPUs with AVX2")
def test_a_training_step_under_the_pin_trains_an_avx2_only_machines_weights(tmp_path):
    # This machine (AVX-512 here; CI's may differ) under the pin, and the same step told that the CPU has no more
    # than AVX2 (every library's switch set by hand, as on an AVX2-only machine): the same weights. Without the pin
    # an AVX-512 machine trains others (weights differ after 3 steps: "Retired benchmarks" on the results page).
    def train(env: dict[str, str], name: str) -> dict:
        out = tmp_path / f"{name}.json"
        code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.test_cpu_isa import train_one_step; " \
               f"train_one_step({str(out)!r})"
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
        return json.loads(out.read_text())

    pinned = train(CLEAN, "pinned")
    avx2_only = train({**CLEAN, **PINNED, "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, "avx2")
    assert pinned["capability"] == avx2_only["capability"] == "AVX2"
    assert pinned["hash"] == avx2_only["hash"]
