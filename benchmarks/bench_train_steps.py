"""Benchmark: seconds per training step with TRL's LM head over every position (TRL's CPU default) and over
the answer tokens only (``flywheel/train.py`` ``answer_tokens_only_on_cpu``), in one process.

Run: ``python benchmarks/bench_train_steps.py [--kinds sft,dpo,rloo] [--steps 6] [--threads N]``

On the bundled Gemma 3 270M (LoRA r 16 on every projection, batch 8, max length 64: the flywheel
quickstart's SFT settings; DPO with the quickstart's DPO settings, RLOO with the verifier's reward, 4
samples a prompt), each trainer runs ``--steps`` optimizer steps on the same rows of task suite 2 twice: the
baseline (the hook replaced by a no-op, so TRL projects every position of the batch through the 262k-token
head) and with the hook. Printed: s/step each way and their ratio, and the largest difference between the
two runs' logged losses (the same data, seed and steps: only float rounding may differ). The load average
is printed before and after: other processes on the cores lower every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="sft,dpo,rloo", help="trainers to time")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the cores)")
    args = ap.parse_args()
    load0 = os.getloadavg()

    from arena_learning.config import ModelSpec
    from arena_learning.engines.transformers_engine import bundled_hf_folder
    from arena_learning.flywheel import train
    from arena_learning.flywheel.harvest import PreferenceItem, SFTItem
    from arena_learning.flywheel.settings import DPOSettings, LoraSettings, RLSettings, SFTSettings
    from arena_learning.tasks import generate_tasks

    target = ModelSpec(name="student", engine="transformers", model="bundled", mode="completion",
                       params={"max_tokens": 12, "stop": ["\n"]})
    prompts = generate_tasks(96, seed=11, suite=2)
    sft = [SFTItem(messages=[{"role": "user", "content": p.turns[0]},
                             {"role": "assistant", "content": p.reference[0]}], prompt_id=p.id) for p in prompts]
    pairs = [PreferenceItem(prompt=[{"role": "user", "content": p.turns[0]}],
                            chosen=[{"role": "assistant", "content": p.reference[0]}],
                            rejected=[{"role": "assistant", "content": p.reference[0][::-1] + "0"}], margin=10.0,
                            prompt_id=p.id) for p in prompts]
    common: dict[str, Any] = {"epochs": 1, "max_steps": args.steps, "batch_size": 8, "micro_batch_size": 8,
                              "max_length": 64, "lora": LoraSettings(r=16, alpha=32), "save_steps": 1000,
                              "warmup_ratio": 0.0, "threads": args.threads}
    base = bundled_hf_folder()
    runs: dict[str, Callable[[str], train.TrainSummary]] = {
        "sft": lambda d: train.train_sft(base, sft, d, SFTSettings(**common, learning_rate=2e-4), spec=target),
        "dpo": lambda d: train.train_dpo(base, pairs, d, DPOSettings(**{**common, "micro_batch_size": 4},
                                                                     learning_rate=5e-5, beta=0.1,
                                                                     loss_type=["sigmoid", "sft"]), spec=target),
        "rloo": lambda d: train.train_rl(base, prompts, d, RLSettings(**common, learning_rate=2e-5, beta=0.04,
                                                                      reward="verifier", num_generations=4,
                                                                      max_completion_length=12), spec=target),
    }
    print(f"bundled Gemma 3 270M, LoRA r 16, batch 8, {args.steps} steps a run; load average before {load0[0]:.2f}")
    hook = train.answer_tokens_only_on_cpu
    for kind in [k for k in args.kinds.split(",") if k]:
        results = {}
        for label in ("every position (TRL on CPU)", "answer tokens only"):
            train.answer_tokens_only_on_cpu = hook if label == "answer tokens only" else contextlib.nullcontext
            with tempfile.TemporaryDirectory() as d:
                results[label] = runs[kind](d)
        train.answer_tokens_only_on_cpu = hook
        (full, compact) = results.values()
        losses = [[e["loss"] for e in r.log if "loss" in e] for r in (full, compact)]
        diff = max((abs(a - b) for a, b in zip(*losses)), default=float("nan"))
        for label, r in results.items():
            print(f"{kind:5s} {label:28s} {r.s_per_step:6.2f} s/step  ({r.steps} steps, train loss {r.train_loss:.4f})")
        print(f"{kind:5s} speed-up x{full.s_per_step / compact.s_per_step:.2f}; largest logged-loss difference "
              f"{diff:.2e} over {len(losses[0])} logs", flush=True)
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
