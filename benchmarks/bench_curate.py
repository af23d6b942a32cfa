"""Benchmark of the curation pipeline: ingest, exact + MinHash dedupe, embedding, k-means.

Conversations are synthesised from the real prompts in ``../shared/data`` (arena-hard,
MT-Bench, Vicuna, the ShareGPT sample, and sentences of arena-hard's GPT-4 answers):
spliced, edited word by word, given openers and follow-up turns, with 5% planted
exact duplicates and 10% planted near duplicates. They are written as a ShareGPT
JSON file, an OpenAI-messages JSONL file and an Alpaca Parquet file, and read back by
the real ingest.

Printed: seconds, items per second and peak resident memory after each stage, and
the embedding stage's throughput as a ratio to a bare ``SentenceTransformer.encode``
of the same texts (target: >= 0.9). Runs pinned to ``--cores`` CPUs (default 2).

    .venv/bin/python benchmarks/bench_curate.py                       # 5,000 conversations, all real
    .venv/bin/python benchmarks/bench_curate.py --n 100000            # the full size: about an hour on 2 cores
    .venv/bin/python benchmarks/bench_curate.py --n 100000 --embed-n 5000   # full size, embedding on a sample
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

OPENERS = [
    "", "", "", "Please help: ", "Quick question. ", "Hi! ", "I need some advice. ", "Can you help me? ",
    "For a school project: ", "My boss asked me this: ", "Be concise. ", "Explain step by step. ",
    "I'm stuck on this. ", "Urgent: ", "Hello, ", "As an expert, ",
]
SUFFIXES = [
    "", "", "", " Thanks!", " Please be detailed.", " Keep it short.", " Use examples.", " Answer in a table.",
    " Explain why.", " What do you think?", " Give me three options.", " Show your reasoning.",
]
FOLLOW_UPS = [
    "Can you make it shorter?", "Now explain it to a child.", "Give me an example.", "Why is that?",
    "What are the drawbacks?", "Rewrite it more formally.", "Can you add sources?", "Translate that to Spanish.",
    "Summarise in one sentence.", "What would an expert add?", "Is there a faster way?", "Now in Python, please.",
]


def rss_mb() -> float:
    """Return the peak resident memory of this process so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_bases() -> tuple[list[str], list[str]]:
    """Return (user texts, assistant texts) from the shared data."""
    if not DATA.exists():
        print(f"skipped: shared data not found at {DATA}; the benchmark synthesises its input from ../shared/data",
              file=sys.stderr)
        raise SystemExit(0)
    users: list[str] = []
    for line in (DATA / "arena-hard-v0.1" / "question.jsonl").open(encoding="utf-8"):
        users.append(json.loads(line)["prompt"])
    for name in ("mt_bench", "vicuna_bench"):
        for line in (DATA / name / "question.jsonl").open(encoding="utf-8"):
            users.extend(json.loads(line)["turns"])
    for conv in json.loads((DATA / "sharegpt_sample" / "dummy_conversation.json").read_text(encoding="utf-8")):
        users.extend(m["value"] for m in conv["conversations"] if m["from"] == "human")
    answers: list[str] = []
    for line in (DATA / "arena-hard-v0.1" / "model_answer" / "gpt-4-0314.jsonl").open(encoding="utf-8"):
        answers.append(json.loads(line)["messages"][1]["content"]["answer"])
    # Sentences of real answers, turned into questions, widen the pool of topics.
    sentences = [s.strip() for a in answers for s in re.split(r"(?<=[.!?])\s+", a) if 40 <= len(s.strip()) <= 300]
    users.extend(f"Can you explain this: {s}" for s in sentences[:6000])
    return list(dict.fromkeys(users)), answers


def synthesise(n: int, seed: int) -> list[dict]:
    """Return ``n`` conversations as {"id", "turns", "replies"} with planted duplicates."""
    rng = random.Random(seed)
    users, answers = load_bases()
    vocab = sorted({w for t in users[:3000] for w in t.split() if w.isalpha() and 3 <= len(w) <= 12})

    def edited(text: str) -> str:
        words = text[:1500].split()
        if len(words) > 8 and rng.random() < 0.7:
            # Splice: the head of this text with the tail of another gives a new request.
            other = rng.choice(users)[:1500].split()
            cut = rng.randrange(3, len(words))
            words = words[:cut] + other[len(other) // 2 :]
        for _ in range(max(1, len(words) // 6)):
            words[rng.randrange(len(words))] = rng.choice(vocab)
        return rng.choice(OPENERS) + " ".join(words) + rng.choice(SUFFIXES)

    convs: list[dict] = []
    for i in range(n):
        r = rng.random()
        if convs and r < 0.05:
            src = rng.choice(convs)  # exact duplicate up to case and spacing
            turns = [("  " + t.upper() + " ") if rng.random() < 0.5 else t.replace(" ", "  ") for t in src["turns"]]
        elif convs and r < 0.15:
            src = rng.choice(convs)  # near duplicate: one word changed
            turns = list(src["turns"])
            words = turns[0].split()
            words[rng.randrange(len(words))] = rng.choice(vocab)
            turns[0] = " ".join(words)
        else:
            n_turns = rng.choices([1, 2, 3], weights=[6, 3, 1])[0]
            turns = [edited(rng.choice(users))]
            for _ in range(n_turns - 1):
                turns.append(rng.choice(FOLLOW_UPS) if rng.random() < 0.6 else edited(rng.choice(users)))
        replies = [rng.choice(answers)[: rng.randrange(100, 600)] for _ in turns]
        convs.append({"id": f"syn-{i}", "turns": turns, "replies": replies})
    return convs


def write_sources(convs: list[dict], folder: Path) -> list[Path]:
    """Write the conversations as ShareGPT JSON (half), OpenAI JSONL and Alpaca Parquet (a quarter each)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    half, three_q = len(convs) // 2, 3 * len(convs) // 4
    sharegpt = [
        {"id": c["id"], "conversations": [m for u, a in zip(c["turns"], c["replies"])
                                          for m in ({"from": "human", "value": u}, {"from": "gpt", "value": a})]}
        for c in convs[:half]
    ]
    paths = [folder / "sharegpt.json", folder / "openai.jsonl", folder / "alpaca.parquet"]
    paths[0].write_text(json.dumps(sharegpt, ensure_ascii=False), encoding="utf-8")
    with open(paths[1], "w", encoding="utf-8") as fh:
        for c in convs[half:three_q]:
            messages = [m for u, a in zip(c["turns"], c["replies"])
                        for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]
            fh.write(json.dumps({"id": c["id"], "messages": messages}, ensure_ascii=False) + "\n")
    rest = convs[three_q:]
    pq.write_table(
        pa.table({
            "id": [c["id"] for c in rest],
            "instruction": [c["turns"][0] for c in rest],
            "input": [""] * len(rest),
            "output": [c["replies"][0] for c in rest],
        }),
        paths[2],
    )
    return paths


class Stages:
    """Times stages and prints one row per stage."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, float, float]] = []

    def run(self, name: str, items: int, fn):
        t = time.perf_counter()
        out = fn()
        self.add(name, items, time.perf_counter() - t)
        return out

    def add(self, name: str, items: int, dt: float) -> None:
        self.rows.append((name, items, dt, rss_mb()))
        print(f"  {name:<28} {items:>9,} items {dt:>9.2f} s {items / dt if dt else 0:>10,.1f}/s  "
              f"peak RSS {rss_mb():>7,.0f} MB", flush=True)


def embed_ab(model, texts: list[str], batch_size: int, seed: int, block: int = 512):
    """Return (embeddings float32 (N, D), seconds of our stage, seconds of a bare encode) over all ``texts``.

    The texts are split into random blocks; on each block our stage and a bare
    ``encode`` run back to back, in alternating order (ABBA...). Other processes on a
    shared machine then load both sides alike, and a drift in load cannot pass for a
    difference between them. Each side embeds every text exactly once.
    """
    import numpy as np

    from arena_learning.curate.embed import embed_texts

    rng = np.random.default_rng(seed)
    n_blocks = max(2, 2 * round(len(texts) / (2 * block)))
    blocks = np.array_split(rng.permutation(len(texts)), n_blocks)
    out = None
    ours_s = bare_s = 0.0
    for k, idx in enumerate(blocks):
        sub = [texts[i] for i in idx]
        for side in ("ours", "bare") if k % 2 == 0 else ("bare", "ours"):
            t = time.perf_counter()
            if side == "ours":
                vecs = embed_texts(model, sub, batch_size)
                ours_s += time.perf_counter() - t
                if out is None:
                    out = np.empty((len(texts), vecs.shape[1]), dtype=np.float32)
                out[idx] = vecs
            else:
                ref = model.encode(sub, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
                bare_s += time.perf_counter() - t
        assert np.allclose(out[idx], ref, atol=1e-4), "our embeddings differ from a bare encode"
        if (k + 1) % 10 == 0 or k + 1 == n_blocks:
            print(f"    block {k + 1}/{n_blocks}: ours {ours_s:.1f} s, bare {bare_s:.1f} s so far", flush=True)
    return out, ours_s, bare_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5_000,
                        help="conversations to synthesise (default 5,000: embedding twice, ours and bare, "
                             "runs at ~50-100 texts/s on 2 cores)")
    parser.add_argument("--embed-n", type=int, default=None,
                        help="embed only a random sample of this many texts (ratio and embed time on the sample; "
                             "k-means still on all points, the rest jittered copies of embedded ones)")
    parser.add_argument("--cores", type=int, default=2, help="CPUs to pin the process to (default 2)")
    parser.add_argument("--clusters", type=int, default=100, help="k-means clusters")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-seq-length", type=int, default=None, help="embedding truncation (default: the model's)")
    parser.add_argument("--threshold", type=float, default=0.8, help="MinHash near-duplicate threshold")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[: args.cores]
        os.sched_setaffinity(0, cpus)
    import numpy as np
    import torch

    torch.set_num_threads(args.cores)

    from arena_learning.curate.dedupe import exact_dedupe, near_dedupe
    from arena_learning.curate.embed import embedding_texts, load_embedder
    from arena_learning.curate.ingest import ingest
    from arena_learning.curate.testset import cluster_embeddings

    print(f"curate benchmark: {args.n:,} conversations, {args.cores} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    t = time.perf_counter()
    convs = synthesise(args.n, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_sources(convs, Path(tmp))
        size = sum(p.stat().st_size for p in paths) / 1e6
        took = time.perf_counter() - t
        print(f"  synthesised and wrote {size:,.0f} MB in {took:.1f} s (not a pipeline stage)", flush=True)
        del convs
        st = Stages()
        report = st.run("ingest (json+jsonl+parquet)", args.n, lambda: ingest(paths))
    prompts = report.prompts
    assert len(prompts) == args.n, report.counts
    kept, dropped, _ = st.run("exact dedupe", len(prompts), lambda: exact_dedupe(prompts))
    print(f"    dropped {dropped['exact_duplicate']:,} exact duplicates", flush=True)
    n_exact = len(kept)
    kept, dropped, _ = st.run("MinHash-LSH near dedupe", n_exact, lambda: near_dedupe(kept, threshold=args.threshold))
    print(f"    dropped {dropped['near_duplicate']:,} near duplicates; {len(kept):,} left", flush=True)

    model = st.run("load embedding model", 1, lambda: load_embedder(max_seq_length=args.max_seq_length))
    texts = embedding_texts(kept)
    n_points = len(texts)
    if args.embed_n is not None and args.embed_n < len(texts):
        pick = np.random.default_rng(args.seed).choice(len(texts), size=args.embed_n, replace=False)
        texts = [texts[i] for i in np.sort(pick)]
        print(f"    embedding a random {len(texts):,} of the {n_points:,} texts (--embed-n)", flush=True)
    # Warm-up: the first batches pay one-off costs (allocator, kernels) that neither side should carry.
    model.encode(texts[:256], batch_size=args.batch_size)
    emb, ours_s, bare_s = embed_ab(model, texts, args.batch_size, args.seed)
    st.add("embed (our stage)", len(texts), ours_s)
    st.add("bare encode (reference)", len(texts), bare_s)
    points = emb
    label = "k-means"
    if n_points > len(emb):
        # Timing proxy at full size: the real embeddings, plus each missing point as a real
        # one jittered (sigma 0.05) and renormalised, so k-means sees the same cluster structure.
        rng = np.random.default_rng(args.seed)
        extra = emb[rng.integers(0, len(emb), n_points - len(emb))]
        extra = extra + rng.normal(0, 0.05, extra.shape).astype(np.float32)
        extra /= np.linalg.norm(extra, axis=1, keepdims=True)
        points = np.concatenate([emb, extra])
        label = "k-means (jittered, see --embed-n)"
    labels, _ = st.run(label, len(points), lambda: cluster_embeddings(points, args.clusters, args.seed, n_init=3))

    pipeline = [r for r in st.rows if r[0] != "bare encode (reference)"]
    print()
    print(f"embedding throughput: ours {len(texts) / ours_s:,.1f}/s, bare encode {len(texts) / bare_s:,.1f}/s, "
          f"ratio {bare_s / ours_s:.3f} (target >= 0.9)")
    print(f"load average now {os.getloadavg()[0]:.2f} (other processes share the cores)")
    print(f"pipeline total {sum(r[2] for r in pipeline):,.1f} s; peak RSS {rss_mb():,.0f} MB; "
          f"{len(set(labels.tolist()))} clusters, sizes {np.bincount(labels).min()}-{np.bincount(labels).max()}")
    return 0 if bare_s / ours_s >= 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
