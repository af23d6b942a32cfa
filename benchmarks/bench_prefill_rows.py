"""Benchmark: would several prompts' chunks in one llama.cpp call buy back the batcher's prompt-evaluation speed?

Issue 36's untried lever. The batcher (``engines/llama_batcher.py``) evaluates a prompt alone, one chunk of at most
``PROMPT_CHUNK`` (32) tokens per ``llama_decode`` call, so that a prompt's numbers never depend on its neighbours;
the quickstart's answers and an LLM judge's games are mostly prompt evaluation. The lever: G prompts' chunks in
one call, each sequence in its own KV stream, at a fixed layout of G x 32 rows (padded), so that a row's kernels
are the same whatever shares the call. Before building it, this measures what it can buy at most: per model, one
call of G x 32 rows (G sequences with consecutive ids, as llama.cpp's equal split of a non-unified KV cache needs)
against one call of 32 rows, in the batcher's own context settings (``kv_unified = false``, one stream a slot,
the configured threads), for G in 1, 2, 4, 8, 16; each timing the median of ``--repeat`` calls after a warm one.

Printed per model: milliseconds a 32-row chunk costs at each G, prompt tokens/s, the ratio to G = 1 (the most the
lever can speed prompt evaluation up, full calls and no padding: every real call pads its last chunk and its
empty groups), and the prompt rate's share of the compute ceiling (``bench_llamacpp_engine``'s float32 matmul
probe divided by a prompt token's FLOPs: every weight but the output head, which runs on one row of a chunk).
Even if an answering phase were all prompt evaluation, the lever cannot speed it up more than the best ratio.
Each sequence's logits (its chunk's last row) are compared with the same chunk alone's: "same" means the
fixed layout keeps a row's numbers whatever shares the call (what the batcher's answers need), a difference that it
does not. Figures are printed, not asserted; the load average is printed before and after (other processes lower them).

    python benchmarks/bench_prefill_rows.py [--models gemma-3-270m,qwen2.5-coder-0.5b-instruct,...] [--threads 2]
        [--groups 1,2,4,8,16] [--repeat 5] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_llamacpp_engine import _has_tensor, model_flops_per_token, probe_gflops  # noqa: E402

MODELS = "gemma-3-270m,qwen2.5-coder-0.5b-instruct,qwen2.5-coder-1.5b-instruct"


def prompt_flops(llm) -> float:
    """Return the FLOPs of one prompt token: a decoded token's less the output head (run on a chunk's last row)."""
    meta = llm.metadata
    arch = meta.get("general.architecture", "")
    n_embd = int(meta.get(f"{arch}.embedding_length", 0))
    head = 2.0 * int(llm.n_vocab()) * n_embd
    return model_flops_per_token(llm, context=16.0) - head


@dataclass
class Measured:
    seconds: dict[int, float]  # G -> the median seconds of one call of G x chunk rows
    differ: dict[int, float]  # G -> the largest |logit difference| of any sequence's last row to the chunk alone's
    flops: float  # of one prompt token


def measure(path: str, threads: int, groups: list[int], repeat: int, chunk: int) -> Measured:
    """Time one llama_decode call of G x ``chunk`` rows for each G of ``groups`` (groups must hold 1), and compare
    each sequence's logits with the same chunk alone's."""
    import llama_cpp as lc

    from arena_learning.engines.llama_batcher import context_params

    llm = lc.Llama(model_path=path, n_ctx=512, n_threads=threads, verbose=False)
    size = max(groups)
    ctx = lc.llama_init_from_model(llm._model.model, context_params(llm, size, 512, size * chunk))
    if not ctx:
        raise SystemExit(f"llama.cpp could not make a context of {size} x 512 cells for {path}")
    mem = lc.llama_get_memory(ctx)
    batch = lc.llama_batch_init(size * chunk, 0, 1)
    words = ("Question: Tom has 4 apples and gets 3 more. How many apples does Tom have now?\nAnswer: 7\n" * 8)
    tokens = llm.tokenize(words.encode())[:chunk]

    n_vocab = int(llm.n_vocab())
    logits: dict[int, list[np.ndarray]] = {}

    def call(g: int) -> float:
        n = 0
        for s in range(g):
            for j in range(chunk):
                batch.token[n] = tokens[j]
                batch.pos[n] = j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = s
                batch.logits[n] = 1 if j == chunk - 1 else 0  # one output a chunk, as the batcher asks
                n += 1
        batch.n_tokens = n
        t = time.perf_counter()
        rc = lc.llama_decode(ctx, batch)
        seconds = time.perf_counter() - t
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc} for {g} x {chunk} rows")
        logits[g] = [np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, s * chunk + chunk - 1), shape=(n_vocab,)).copy()
                     for s in range(g)]
        for s in range(g):
            lc.llama_memory_seq_rm(mem, s, 0, -1)
        return seconds

    out: dict[int, float] = {}
    differ: dict[int, float] = {}
    try:
        for g in groups:
            call(g)  # warm: the graph and buffers of this shape
            out[g] = statistics.median(call(g) for _ in range(repeat))
        for g in groups:  # every sequence's logits against the same chunk alone (G = 1)
            differ[g] = max(float(np.max(np.abs(x - logits[1][0]))) for x in logits[g])
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
    return Measured(out, differ, prompt_flops(llm))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS, help="registry names or GGUF paths, comma-separated")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--groups", default="1,2,4,8,16")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--record", action="store_true", help="append the best ratios to benchmarks/results.jsonl")
    args = ap.parse_args()
    from arena_learning.engines.bundled import resolve_model_path
    from arena_learning.engines.llama_batcher import PROMPT_CHUNK

    groups = sorted({int(g) for g in args.groups.split(",")} | {1})
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.threads} threads; chunk {PROMPT_CHUNK} rows",
          flush=True)
    gflops = probe_gflops(args.threads)
    print(f"matmul probe: {gflops:.1f} GFLOP/s (numpy float32, {args.threads} threads)")
    best: dict[str, float] = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        path = str(resolve_model_path(name))
        m = measure(path, args.threads, groups, args.repeat, PROMPT_CHUNK)
        res, flops = m.seconds, m.flops
        one = res[1]
        tied = "" if _has_tensor(path, "output.weight") else ", tied output head"
        print(f"\n{name} ({flops / 1e6:.0f} MFLOP a prompt token{tied})")
        print(f"  {'G':>3} {'rows':>5} {'ms a call':>10} {'ms a chunk':>11} {'prompt tok/s':>13} {'x G=1':>6} "
              f"{'ceiling':>8} {'logits vs alone':>16}")
        for g, s in res.items():
            rate = g * PROMPT_CHUNK / s
            print(f"  {g:3d} {g * PROMPT_CHUNK:5d} {s * 1000:10.1f} {s * 1000 / g:11.1f} {rate:13.1f} "
                  f"{one * g / s:6.2f} {rate * flops / (gflops * 1e9):8.1%} "
                  f"{'same' if m.differ[g] == 0 else f'max diff {m.differ[g]:.2g}':>16}")
        best[name] = max(one * g / s for g, s in res.items())
        print(f"  the lever's most: x{best[name]:.2f} on prompt evaluation (full calls, no padding)", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if args.record:
        from results import record

        for name, ratio in best.items():
            record(f"prefill_rows.{name}.best_x", round(ratio, 3), "x", "higher",
                   f"python benchmarks/bench_prefill_rows.py --threads {args.threads}",
                   note=f"one call of G x {PROMPT_CHUNK} prompt rows against one of {PROMPT_CHUNK}, G in {groups}, "
                        "the batcher's context (kv_unified false)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
