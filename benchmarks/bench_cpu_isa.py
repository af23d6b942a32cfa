"""Does training depend on the CPU's instruction set? The same SFT steps under each CPU capability, one machine.

torch picks its CPU kernels at run time: ATen's vectorised kernels (``ATEN_CPU_CAPABILITY``: default, avx2,
avx512), MKL's BLAS (``MKL_ENABLE_INSTRUCTIONS``, and ``MKL_CBWR``, its conditional numerical reproducibility) and
oneDNN (``ONEDNN_MAX_CPU_ISA``). Two machines of one kind with and without AVX-512 then sum in other orders, round
otherwise, and train other weights. Each setting below runs ``--steps`` optimizer steps of the flywheel's SFT
(the bundled Gemma 3 270M, LoRA r 16, batch 8, the same rows, seed and threads) in a process of its own (the
variables are read when the libraries start) and prints the trainer's s/step, the training loss and a hash of the
trained weights:

- ``default``: nothing set (this machine's best: AVX-512 where it has it);
- ``aten-avx2``: ATen's kernels pinned to AVX2 alone;
- ``pinned``: what ``arena_learning.cpu_isa.pin_cpu_isa`` sets (ATen avx2, MKL's AVX2 code path, oneDNN AVX2);
- ``avx2-only``: the pinned settings plus MKL told the CPU has no more than AVX2 (as on an AVX2-only machine).

``pinned`` and ``avx2-only`` giving one hash, where ``default`` gives another, is what the pin buys: the weights an
AVX2 machine trains. The ratio of ``default``'s s/step to ``pinned``'s is what it costs.

    python benchmarks/bench_cpu_isa.py              # 4 steps a setting, about 4 min quiet
    python benchmarks/bench_cpu_isa.py --steps 2 --settings default,pinned
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {
    "default": {},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "pinned": None,  # the project's pin (filled in main from arena_learning.cpu_isa)
    "avx2-only": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},  # added to the pin
}
ISA_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "ARENA_CPU_ISA")


def child(steps: int, out: Path) -> None:
    """Train ``steps`` SFT steps here and write the figures to ``out`` (run in a process of its own)."""
    import torch

    from arena_learning.config import ModelSpec
    from arena_learning.engines.transformers_engine import bundled_hf_folder
    from arena_learning.flywheel import train
    from arena_learning.flywheel.harvest import SFTItem
    from arena_learning.flywheel.settings import LoraSettings, SFTSettings
    from arena_learning.tasks import generate_tasks

    target = ModelSpec(name="student", engine="transformers", model="bundled", mode="completion",
                       params={"max_tokens": 12, "stop": ["\n"]})
    prompts = generate_tasks(64, seed=11, suite=2)
    sft = [SFTItem(messages=[{"role": "user", "content": p.turns[0]},
                             {"role": "assistant", "content": p.reference[0]}], prompt_id=p.id) for p in prompts]
    settings = SFTSettings(epochs=1, max_steps=steps, batch_size=8, micro_batch_size=8, max_length=64,
                           lora=LoraSettings(r=16, alpha=32), save_steps=1000, warmup_ratio=0.0,
                           learning_rate=2e-4)
    base = bundled_hf_folder()
    with tempfile.TemporaryDirectory(prefix="isa-") as tmp:
        start = time.perf_counter()
        result = train.train_sft(base, sft, Path(tmp) / "stage", settings, spec=target)
        seconds = time.perf_counter() - start
        digest = hashlib.sha256()
        for f in sorted((Path(tmp) / "stage" / "model").glob("*.safetensors")):
            digest.update(f.read_bytes())
    out.write_text(json.dumps({
        "capability": torch.backends.cpu.get_cpu_capability(), "seconds": seconds, "s_per_step": result.s_per_step,
        "hash": digest.hexdigest()[:16], "loss": result.train_loss,
    }))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4, help="SFT steps a setting")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="which settings, in order")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.steps, args.child)
        return 0
    from arena_learning.cpu_isa import PINNED

    base_env = {k: v for k, v in os.environ.items() if k not in ISA_VARS}
    results = {}
    for name in args.settings.split(","):
        extra = dict(PINNED) if name in ("pinned", "avx2-only") else {}
        extra.update(SETTINGS[name] or {})
        extra.setdefault("ARENA_CPU_ISA", "native")  # the project's own pin only where a setting asks for it
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "fig.json"
            proc = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child", str(out)],
                                  env={**base_env, **extra}, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
            results[name] = json.loads(out.read_text())
        r = results[name]
        shown = " ".join(f"{k}={v}" for k, v in extra.items() if k != "ARENA_CPU_ISA") or "(nothing set)"
        print(f"{name:10} torch capability {r['capability']:8} {r['s_per_step']:.2f} s/step  weights {r['hash']}  "
              f"loss {r['loss']}  [{shown}]", flush=True)
    if "default" in results and "pinned" in results:
        d, p = results["default"], results["pinned"]
        print(f"pinned vs default: {d['s_per_step'] / p['s_per_step']:.2f}x the speed; weights "
              f"{'the same' if d['hash'] == p['hash'] else 'different'}")
    if "pinned" in results and "avx2-only" in results:
        same = results["pinned"]["hash"] == results["avx2-only"]["hash"]
        print(f"pinned vs an AVX2-only MKL: weights {'the same' if same else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
