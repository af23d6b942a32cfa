"""Benchmark: a trained model saved in float32 (as the flywheel saves it) against the same weights saved in bfloat16
or float16, each exported to GGUF (f16, as ``training.serve_as: llamacpp`` serves it) and answering the same test
prompts through llama.cpp.

The question (issue 38): would saving each stage in bfloat16 (half the disk, about 0.5 GB instead of 1.1 GB a
stage for Gemma 3 270M) leave the served answers unchanged? The GGUF export writes f16 matrices whatever the
folder holds, so a float16 save rounds the matrices exactly as the export does; bfloat16 keeps 8 bits of mantissa
where f16 keeps 11, and the 1-D tensors (norms) stay f32 in the GGUF, so both saves round those too.

Printed per save: seconds and MB on disk, the export's seconds, answers equal to the float32 save's, exact
answers by the task suite's checkers. Greedy answers that move show near ties the rounding tips, so "answers
unchanged" is counted, not assumed.

    python benchmarks/bench_save_dtype.py FOLDER [--n 288] [--dtypes bfloat16,float16] [--threads N]

FOLDER is a trained stage's ``model`` folder (e.g. ``WS/flywheel/round-4/0-sft/model``); the prompts are
``generate_tasks(n, seed=0, suite=2)`` (the ladder's test set) and the spec is examples/flywheel-ladder.yaml's
target (zero-shot completion, greedy, 16 tokens), batched through llama.cpp as the flywheel serves it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="a trained stage's model folder (float32 safetensors)")
    ap.add_argument("--n", type=int, default=288, help="test prompts (suite 2, seed 0)")
    ap.add_argument("--dtypes", default="bfloat16,float16", help="save dtypes compared with float32")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    folder = Path(args.folder)
    if not (folder / "config.json").is_file():
        raise SystemExit(f"{folder}: no config.json; give a trained stage's model folder")

    import torch
    from transformers import AutoModelForCausalLM

    from arena_learning.config import ModelSpec, load_config_file
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import run_requests
    from arena_learning.engines.gguf_export import export_gguf
    from arena_learning.engines.transformers_engine import release_models
    from arena_learning.flywheel.settings import FlywheelConfig
    from arena_learning.store import Store
    from arena_learning.tasks import check, generate_tasks

    cfg = load_config_file(REPO / "examples" / "flywheel-ladder.yaml", FlywheelConfig)
    target = cfg.target
    prompts = generate_tasks(args.n, seed=0, suite=2)
    reqs = [Request(messages=[{"role": "user", "content": p.turns[0]}]) for p in prompts]
    load0 = os.getloadavg()[0]
    print(f"{folder}: {len(reqs)} suite-2 test prompts, {target.mode} mode, greedy, max_tokens "
          f"{target.params.max_tokens}, llama.cpp parallel {target.batch_size}, {args.threads} threads; load average "
          f"{load0:.2f}", flush=True)

    def served(path: Path) -> list[str]:
        spec = ModelSpec(name=target.name, engine="llamacpp", model=str(path), mode=target.mode,
                         prompt_format=target.prompt_format, params=target.params, n_ctx=target.n_ctx,
                         n_threads=args.threads, parallel=target.batch_size)
        with tempfile.TemporaryDirectory() as tmp, Store(tmp) as store:
            outs = run_requests(store, build_engine(spec), reqs, show_progress=False)
        release_models()
        return [c.text if c is not None else "<failed>" for c in outs]

    def size_mb(path: Path) -> float:
        return sum(f.stat().st_size for f in path.glob("*.safetensors")) / 1e6

    with tempfile.TemporaryDirectory(prefix="bench-save-dtype-") as tmp:
        rows: list[tuple[str, float, float, float, list[str]]] = []
        for dtype in ["float32", *(d for d in args.dtypes.split(",") if d)]:
            src = folder
            save_s = 0.0
            if dtype != "float32":
                src = Path(tmp) / dtype
                t = time.perf_counter()
                model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
                model.to(getattr(torch, dtype)).save_pretrained(str(src))
                save_s = time.perf_counter() - t
                del model
                for f in folder.iterdir():  # the tokenizer and config files, as the flywheel saves them
                    if f.is_file() and f.suffix != ".safetensors" and not (src / f.name).exists():
                        shutil.copy2(f, src / f.name)
            t = time.perf_counter()
            gguf = export_gguf(src, Path(tmp) / f"{dtype}.gguf", quantize="f16", threads=args.threads)
            export_s = time.perf_counter() - t
            rows.append((dtype, save_s, size_mb(src), export_s, served(gguf)))
            print(f"  {dtype}: answered", flush=True)
    base = rows[0][4]
    print(f"\n{'save dtype':10} {'save s':>7} {'MB on disk':>11} {'export s':>9} {'same answers as float32':>24} "
          f"{'exact':>7}")
    for dtype, save_s, mb, export_s, texts in rows:
        same = sum(a == b for a, b in zip(texts, base))
        exact = sum(check(p, [t]) >= 10 for p, t in zip(prompts, texts))
        print(f"{dtype:10} {save_s:7.1f} {mb:11.0f} {export_s:9.1f} {f'{same}/{len(texts)}':>24} {exact:>7}")
        moved = [(p.turns[0], a, b) for p, a, b in zip(prompts, base, texts) if a != b][:3]
        for q, a, b in moved:
            print(f"    {q!r}: float32 {a!r} -> {b!r}")
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
