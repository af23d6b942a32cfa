"""Benchmark: the hard test set's difficulty judge (1-10 per request) offline, the bundled default beside Qwen 1.5B.

``arena testset build`` keeps the requests a judge rates hardest. Offline, the default judge is the bundled Gemma
270M base with a few rated examples (it answers in the right shape but rates poorly); Qwen2.5-Coder 1.5B Instruct
from the model registry is the other offline choice (``hard.judge: {engine: llamacpp, model:
qwen2.5-coder-1.5b-instruct, mode: chat}``). No difficulty is known for real prompts, but their categories say
something: on Vicuna's 80 questions a judge that reads difficulty should rate math, coding and Fermi estimates
above generic advice and roleplay. Printed per judge: the mean score per category, the mean of the three
"reasoning" categories minus the mean of the rest, the spread of scores, failures, seconds; and the rank
correlation between the two judges. Through the engines and the ledger (``DifficultyJudge``: cached, so a rerun in
the same workspace costs nothing).

    python benchmarks/bench_difficulty_judge.py [--workspace WS] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "vicuna_bench" / "question.jsonl"
REASONING = {"math", "coding", "fermi"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=None, help="a workspace for the ledger (default: temporary)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions")
    args = ap.parse_args(argv)
    if not DATA.is_file():
        print(f"skipped: {DATA} not found (the public data lives in ../shared/data beside the repository)")
        return 0

    from scipy.stats import spearmanr

    from arena_learning.config import ModelSpec, SamplingParams
    from arena_learning.curate.difficulty import default_difficulty_judge
    from arena_learning.curate.ingest import ingest
    from arena_learning.curate.testset import judge_difficulty_scorer, score_difficulty
    from arena_learning.engines.transformers_engine import release_models
    from arena_learning.store import Store

    prompts = ingest([DATA]).prompts[: args.limit]
    judges = {
        "gemma-270m (default)": default_difficulty_judge(),
        "qwen-1.5b": ModelSpec(name="qwen-difficulty", engine="llamacpp", model="qwen2.5-coder-1.5b-instruct",
                               mode="chat", params=SamplingParams(max_tokens=48, temperature=0.0)),
    }
    ws = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="bench-difficulty-"))
    scores: dict[str, dict[str, float]] = {}
    print(f"{len(prompts)} Vicuna questions; categories {dict(Counter(p.category for p in prompts))}")
    with Store(ws) as store:
        for label, spec in judges.items():
            started = time.perf_counter()
            rated, counts = score_difficulty(prompts, judge_difficulty_scorer(store, spec, label=label))
            seconds = time.perf_counter() - started
            release_models()
            got = {p.id: float(p.difficulty) for p in rated if p.difficulty is not None}
            scores[label] = got
            by_cat: dict[str, list[float]] = defaultdict(list)
            for p in rated:
                if p.difficulty is not None:
                    by_cat[p.category or "-"].append(float(p.difficulty))
            means = {c: sum(v) / len(v) for c, v in sorted(by_cat.items())}
            hard = [s for c, v in by_cat.items() if c in REASONING for s in v]
            rest = [s for c, v in by_cat.items() if c not in REASONING for s in v]
            gap = (sum(hard) / len(hard) - sum(rest) / len(rest)) if hard and rest else float("nan")
            print(f"\n{label}: {len(got)} rated, {counts.get('difficulty_failed', 0)} failed, {seconds:.0f} s; "
                  f"scores used {dict(sorted(Counter(round(s) for s in got.values()).items()))}")
            print("  by category: " + ", ".join(f"{c} {m:.1f}" for c, m in means.items()))
            print(f"  math, coding and fermi minus the rest: {gap:+.2f}")
    a, b = (scores[k] for k in judges)
    both = sorted(set(a) & set(b))
    if len(both) > 2:
        rho = spearmanr([a[i] for i in both], [b[i] for i in both]).statistic
        print(f"\nthe two judges' rank correlation over {len(both)} questions: Spearman {rho:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
