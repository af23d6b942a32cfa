"""A flywheel model served through transformers beside the same weights exported to GGUF in llama.cpp.

The flywheel's trained model (issue 20 item 2) answers the test set through the transformers
engine; ``training.serve_as: llamacpp`` exports it to GGUF (``engines/gguf_export.py``) and serves
it through llama.cpp instead. On ``--n`` test prompts (``generate_tasks(n, seed=0)``) and the
flywheel quickstart's target spec (examples/flywheel-same-weights.yaml: zero-shot completion, greedy, max 16
tokens), in one process, through the engines and the ledger (``run_requests``):

- transformers float32 at batch 16: the baseline every ratio and agreement count is against;
- transformers bfloat16 at batch 16, and the batch sizes of ``--batches`` in each dtype of
  ``--dtypes`` (which batch size and dtype answer fastest on these cores);
- llama.cpp on the folder exported as f32, f16 and q4_k_m (``parallel`` = the spec's batch size),
  plus the bundled Q4_K_M GGUF itself when the folder is the bundled model's (the roundtrip).

It prints seconds, tokens/s, the ratio to the baseline's tokens/s, and how many answers equal the
baseline's text; the export's own seconds too. Other processes on the cores lower every figure:
the load average is printed before and after.

    python benchmarks/bench_serve_as.py [--folder HF_FOLDER] [--n 48] [--batches 4,8,32] [--dtypes bfloat16]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=None, help="a Hugging Face model folder (default: the bundled model's)")
    ap.add_argument("--n", type=int, default=48, help="test prompts")
    ap.add_argument("--batches", default="4,8,32", help="more transformers batch sizes ('' for none)")
    ap.add_argument("--dtypes", default="bfloat16", help="dtypes of the batch-size sweep")
    ap.add_argument("--exports", default="f32,f16,q4_k_m", help="GGUF exports served through llama.cpp")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=None, help="folder for the exported GGUFs (default: a temporary one)")
    args = ap.parse_args()
    load0 = os.getloadavg()

    from arena_learning.config import ModelSpec, load_config_file
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.bundled import bundled_model_path
    from arena_learning.engines.calls import run_requests
    from arena_learning.engines.gguf_export import export_gguf
    from arena_learning.engines.transformers_engine import bundled_hf_folder, release_models
    from arena_learning.flywheel.settings import FlywheelConfig
    from arena_learning.store import Store
    from arena_learning.tasks import generate_tasks

    cfg = load_config_file(REPO / "examples" / "flywheel-same-weights.yaml", FlywheelConfig)
    folder = Path(args.folder) if args.folder else bundled_hf_folder()
    target = cfg.target.model_copy(update={"model": str(folder), "n_threads": args.threads})
    prompts = generate_tasks(args.n, seed=0)
    reqs = [Request(messages=[{"role": "user", "content": p.turns[0]}]) for p in prompts]
    print(f"{len(reqs)} test prompts, {target.mode} mode, greedy, max_tokens {target.params.max_tokens}; "
          f"{args.threads} threads; folder {folder}; load average before {load0[0]:.2f}")

    def answer(spec: ModelSpec) -> tuple[list[str], int, float]:
        engine = build_engine(spec)
        with tempfile.TemporaryDirectory() as tmp, Store(tmp) as store:
            t = time.perf_counter()
            outs = run_requests(store, engine, reqs, show_progress=False)
            seconds = time.perf_counter() - t
        release_models()
        return [c.text if c is not None else "<failed>" for c in outs], sum(c.tokens_out for c in outs if c), seconds

    base_texts: list[str] = []
    base_rate = 0.0

    def report(label: str, spec: ModelSpec) -> None:
        nonlocal base_texts, base_rate
        texts, tokens, seconds = answer(spec)
        rate = tokens / seconds
        if not base_texts:
            base_texts, base_rate = texts, rate
        same = sum(a == b for a, b in zip(texts, base_texts))
        print(f"{label:38s} {seconds:7.1f} s {rate:7.1f} tok/s  x{rate / base_rate:5.2f}  same answers as the "
              f"baseline: {same}/{len(texts)}  ({tokens} tokens)", flush=True)

    report("transformers float32 batch 16 (base)", target.model_copy(update={"dtype": "float32", "batch_size": 16}))
    report("transformers bfloat16 batch 16", target.model_copy(update={"dtype": "bfloat16", "batch_size": 16}))
    for dtype in [d for d in args.dtypes.split(",") if d]:
        for b in [int(x) for x in args.batches.split(",") if x]:
            report(f"transformers {dtype} batch {b}", target.model_copy(update={"dtype": dtype, "batch_size": b}))
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(args.out) if args.out else Path(tmp)
        for q in [x for x in args.exports.split(",") if x]:
            t = time.perf_counter()
            path = export_gguf(folder, out_dir / f"model-{q}.gguf", quantize=q,  # type: ignore[arg-type]
                               threads=args.threads)
            print(f"export {q}: {time.perf_counter() - t:.1f} s, {path.stat().st_size / 1e6:.0f} MB", flush=True)
            served = ModelSpec(name=target.name, engine="llamacpp", model=str(path), mode=target.mode,
                               prompt_format=target.prompt_format, params=target.params, n_ctx=target.n_ctx,
                               n_threads=args.threads, parallel=target.batch_size)
            report(f"llama.cpp {q} export, parallel {target.batch_size}", served)
        if args.folder is None:
            served = ModelSpec(name=target.name, engine="llamacpp", model=str(bundled_model_path()), mode=target.mode,
                               prompt_format=target.prompt_format, params=target.params, n_ctx=target.n_ctx,
                               n_threads=args.threads, parallel=target.batch_size)
            report(f"llama.cpp bundled Q4_K_M, parallel {target.batch_size}", served)
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
