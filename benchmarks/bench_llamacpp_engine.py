"""llama.cpp through our engine (and the ledger) vs bare ``llama_cpp.Llama`` calls on the same prompts.

Both sides load the bundled model with the same settings and decode greedily
with the same few-shot prompt format; the figure is generations per second and
the ratio ours / bare (goal >= 0.95). The prompts go in small chunks, each run
by both sides, which go first in turn: llama.cpp's two threads slow down badly
when anything else wants a core, so long runs one after the other would
measure the machine's load, not the code.

    python benchmarks/bench_llamacpp_engine.py [--n 10] [--rounds 12]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

SHOTS = [("What is 12 + 7?", "19"), ("What is the capital of Japan?", "Tokyo"),
         ("How many minutes are in 3 hours?", "180"), ("Spell the word 'dog' backwards.", "god")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10, help="prompts per chunk")
    ap.add_argument("--rounds", type=int, default=12, help="chunks")
    args = ap.parse_args()

    from llama_cpp import Llama

    from arena_learning.engines.calls import run_requests
    from arena_learning.config import ModelSpec
    from arena_learning.tasks import generate_tasks
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request, render_completion_prompt
    from arena_learning.engines.bundled import bundled_model_path
    from arena_learning.store import Store

    threads = os.cpu_count() or 1
    spec = ModelSpec(name="g", engine="llamacpp", model="bundled", mode="completion", n_threads=threads,
                     prompt_format={"few_shot": SHOTS}, params={"max_tokens": 24, "stop": ["\n"]})
    engine = build_engine(spec)
    bare = Llama(model_path=str(bundled_model_path()), n_ctx=spec.n_ctx, n_threads=threads, verbose=False)
    prompts = generate_tasks(args.n * args.rounds, seed=11)
    texts = [render_completion_prompt(spec.prompt_format, [{"role": "user", "content": p.turns[0]}]) for p in prompts]

    bare_s = ours_s = 0.0
    bare_tokens = ours_tokens = 0
    def run_bare(chunk: slice) -> tuple[float, int]:
        t, tokens = time.perf_counter(), 0
        for text in texts[chunk]:
            out = bare.create_completion(prompt=text, max_tokens=24, temperature=0.0, top_p=1.0, seed=0,
                                         stop=["\n", "Question:"])
            tokens += out["usage"]["completion_tokens"]
        return time.perf_counter() - t, tokens

    def run_ours(chunk: slice) -> tuple[float, int]:
        with tempfile.TemporaryDirectory() as tmp, Store(tmp) as store:
            reqs = [Request(messages=[{"role": "user", "content": p.turns[0]}]) for p in prompts[chunk]]
            t = time.perf_counter()
            outs = run_requests(store, engine, reqs, show_progress=False)
            return time.perf_counter() - t, sum(c.tokens_out for c in outs)

    for r in range(args.rounds):
        chunk = slice(r * args.n, (r + 1) * args.n)
        for side in ((run_bare, run_ours) if r % 2 == 0 else (run_ours, run_bare)):
            seconds, tokens = side(chunk)
            if side is run_bare:
                bare_s, bare_tokens = bare_s + seconds, bare_tokens + tokens
            else:
                ours_s, ours_tokens = ours_s + seconds, ours_tokens + tokens
    total = args.n * args.rounds
    print(f"prompts: {total} (few-shot completion, greedy, max 24 tokens), threads {threads}")
    print(f"bare llama_cpp.Llama:      {total / bare_s:6.2f} gen/s  {bare_tokens / bare_s:7.1f} tok/s")
    print(f"engine + ledger:           {total / ours_s:6.2f} gen/s  {ours_tokens / ours_s:7.1f} tok/s")
    print(f"throughput ratio ours/bare: {bare_s / ours_s:5.3f}  (goal >= 0.95; tokens out {ours_tokens} vs {bare_tokens})")
    return 0 if bare_s / ours_s >= 0.95 else 1


if __name__ == "__main__":
    raise SystemExit(main())
