"""How much a vote over samples lifts the flywheel's 8-shot reference (issue 18, item 2).

The 8-shot reference of examples/flywheel-same-weights.yaml (the bundled Gemma 3 270M base model through llama.cpp,
its few-shot list copied here) answers ``--n`` prompts of the built-in task suite (``--n`` / 9 per
category, seed ``--seed``, the few-shot questions left out) three ways, in one process and one
workspace (every call through the ledger):

- greedy: one answer per prompt at temperature 0 (the reference as the flywheel runs it);
- majority: ``vote: {k, temperature, method: majority}``, self-consistency over k seeded samples;
- best_of_k: the same k samples (served by the ledger: no new call), the one the verifier scores best
  against the reference answer. It has seen the reference: an oracle, the ceiling of what a vote over
  these samples could pick (pass@k), fair only as a teacher for harvesting.

It prints exact answers (checker score 10) per category and overall, the paired counts against greedy
(prompts gained and lost), and the seconds each took (best_of_k's are its samples', made by majority).

    OMP_NUM_THREADS=1 python benchmarks/bench_vote.py [--n 90] [--k 5] [--temperature 0.7] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

FEW_SHOT_8 = [  # examples/flywheel-same-weights.yaml, reference gemma-270m-8shot
    ["What is 12 + 7?", "19"],
    ["What is the capital of Japan?", "Tokyo"],
    ["Write the word 'river' in uppercase letters.", "RIVER"],
    ["How many letters are in the word 'stone'?", "5"],
    ["Which number is larger, 412 or 87?", "412"],
    ["How many minutes are in 3 hours?", "180"],
    ["Sort these numbers from smallest to largest: 42, 7, 19.", "7, 19, 42"],
    ["What number comes next in the sequence 3, 6, 9, 12, ...?", "15"],
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=90, help="task prompts, spread evenly over the categories")
    ap.add_argument("--seed", type=int, default=0, help="the task suite's seed (0: the flywheel's test set's)")
    ap.add_argument("--k", type=int, default=5, help="samples per prompt")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--workspace", type=Path, default=None, help="keep the ledger here (default: a temporary one)")
    args = ap.parse_args()

    from arena_learning import pipeline
    from arena_learning.config import RunConfig
    from arena_learning.store import Store
    from arena_learning.tasks import check, generate_tasks

    reference = {"engine": "llamacpp", "model": "bundled", "mode": "completion", "n_threads": args.threads,
                 "prompt_format": {"few_shot": FEW_SHOT_8},
                 "params": {"max_tokens": 16, "temperature": 0.0, "stop": ["\n"]}}
    vote = {"k": args.k, "temperature": args.temperature, "seed": 0}
    cfg = RunConfig.model_validate({"name": "bench-vote", "models": [
        {"name": "greedy", **reference},
        {"name": "majority", **reference, "vote": {**vote, "method": "majority"}},
        {"name": "best_of_k", **reference, "vote": {**vote, "method": "best_of_k"}},
    ]})
    prompts = generate_tasks(args.n, seed=args.seed, exclude={q for q, _ in FEW_SHOT_8})
    names = [m.name for m in cfg.models]
    print(f"{len(prompts)} task prompts (seed {args.seed}), 8-shot reference, k={args.k} T={args.temperature}, "
          f"{args.threads} thread(s)", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = args.workspace or Path(tmp) / "ws"
        seconds: dict[str, float] = {}
        calls: dict[str, tuple[int, int]] = {}
        with Store(root) as store:
            for name in names:
                t = time.perf_counter()
                report = pipeline.stage_answer(cfg, store, prompts=prompts, show_progress=False,
                                               skip=set(names) - {name})
                seconds[name] = time.perf_counter() - t
                s = report.stats[name]
                calls[name] = (s.sent, s.cached)
                print(f"  {name}: {seconds[name]:.0f} s, {s.sent} calls sent, {s.cached} from the ledger, "
                      f"{s.failed} failed, {report.incomplete[name]} prompts unanswered", flush=True)
            exact = {name: {a.prompt_id: check(p, a.turns) == 10.0 for p in prompts
                            for a in store.get_answers(name) if a.prompt_id == p.id} for name in names}

    by_cat: dict[str, list[str]] = defaultdict(list)
    for p in prompts:
        by_cat[p.category or "-"].append(p.id)
    head = f"{'category':<16}{'n':>4}" + "".join(f"{n:>12}" for n in names)
    print("\nexact answers (checker score 10)\n" + head)
    for cat, ids in [*sorted(by_cat.items()), ("overall", [p.id for p in prompts])]:
        row = f"{cat:<16}{len(ids):>4}"
        for name in names:
            row += f"{sum(exact[name].get(i, False) for i in ids):>12}"
        print(row)
    print("\npaired against greedy (same prompts): gained / lost")
    for name in names[1:]:
        gained = sum(exact[name].get(p.id, False) and not exact["greedy"].get(p.id, False) for p in prompts)
        lost = sum(exact["greedy"].get(p.id, False) and not exact[name].get(p.id, False) for p in prompts)
        total = sum(exact[name].get(p.id, False) for p in prompts)
        base = sum(exact["greedy"].get(p.id, False) for p in prompts)
        print(f"  {name}: +{gained} / -{lost} (net {total - base:+d}; {total} vs {base})")
    print("\nseconds: " + ", ".join(f"{n} {seconds[n]:.0f}" for n in names)
          + f" (best_of_k reuses majority's {args.k * len(prompts)} samples from the ledger; "
          f"majority / greedy {seconds['majority'] / max(seconds['greedy'], 1e-9):.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
