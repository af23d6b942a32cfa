"""Benchmark: seeded samples through the transformers engine, batched (RowSampler) against one at a time.

Run: ``python benchmarks/bench_samples.py [--n 32] [--batch 16] [--threads 2]``

The flywheel's own samples (``harvest.samples``) are seeded sampled requests to the student. Before,
the engine ran each sampled request alone (so that a sample repeated whatever ran beside it); now a
batch samples every row from its own seeded generator. This runs ``n`` task prompts of suite 2 through
the bundled model (transformers, bfloat16, completion mode, the flywheel quickstart's settings) at
temperature 0.7, once with ``batch_size: 1`` (the old way) and once with ``batch_size: BATCH``, in this
process, and prints seconds, requests/s, the ratio, and how many samples are identical between the two
runs (a row's draws depend only on its seed and prompt; only the last bits of its logits can differ).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.base import Request
from arena_learning.tasks import generate_tasks


def run(spec: ModelSpec, requests: list[Request]) -> tuple[float, list[str]]:
    engine = build_engine(spec)
    engine.generate_batch(requests[:1])  # load the model before the clock starts

    async def go() -> list[str]:
        out = await asyncio.gather(*(engine.complete(r) for r in requests))
        await engine.aclose()
        return [c.text for c in out]

    t = time.perf_counter()
    texts = asyncio.run(go())
    return time.perf_counter() - t, texts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    prompts = generate_tasks(args.n, seed=7, suite=2)
    requests = [Request(messages=[{"role": "user", "content": p.turns[0]}],
                        params={"temperature": 0.7, "seed": 3}) for p in prompts]
    base = dict(name="student", engine="transformers", model="bundled", mode="completion", dtype="bfloat16",
                n_threads=args.threads, params={"max_tokens": 16, "temperature": 0.0, "stop": ["\n"]})
    alone_s, alone = run(ModelSpec(**base, batch_size=1), requests)
    batch_s, batched = run(ModelSpec(**base, batch_size=args.batch), requests)
    same = sum(a == b for a, b in zip(alone, batched))
    print(f"{args.n} seeded samples (T=0.7), bundled 270M, transformers bfloat16, {args.threads} threads")
    print(f"  one at a time (batch_size 1): {alone_s:6.1f} s  {args.n / alone_s:5.2f} requests/s")
    print(f"  batched (batch_size {args.batch:2d}):     {batch_s:6.1f} s  {args.n / batch_s:5.2f} requests/s")
    print(f"  ratio {alone_s / batch_s:.2f}x; identical samples {same}/{args.n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
