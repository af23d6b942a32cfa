"""Importing MT-Bench-style single grades: 4,461 grades of 15 models (FastChat's gpt-4_single.jsonl layout).

Synthetic grades of the published size (issue 21): 150 questions x 2 turns x 15 models, less 39 missing,
= 4,461 grades, each with a 2,000-character judgment text of words drawn Zipf-like from a 3,000-word
vocabulary (about as compressible as English, a little less); pairwise, that is 30,956 games. Published
GPT-4 single judgments average about 1,900 characters (142 MB for 30,966 games each holding two). The file
is written once, then ``arena import-judgments FILE -w WS`` is timed as a subprocess (start-up included)
and the workspace's ``arena.db`` is measured. Goal: under 10 s and under 10 MB; exits 1 when missed.
``--record`` appends both figures to ``benchmarks/results.jsonl`` (``make bench-check`` compares with them).

    python benchmarks/bench_import_grades.py [--goal-s 10] [--goal-mb 10] [--record]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import emit  # benchmarks/results.py: the results log

ARENA = [sys.executable, "-m", "arena_learning"]


def _text(rng: random.Random, vocab: list[str], cum: list[float], chars: int) -> str:
    words = rng.choices(vocab, cum_weights=cum, k=chars // 3)  # more than enough words; cut to length
    return " ".join(words)[:chars]


def write_grades(path: Path, questions: int = 150, models: int = 15, text_chars: int = 2000) -> int:
    rng = random.Random(0)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocab = ["".join(rng.choices(letters, [26 - i for i in range(26)], k=rng.randint(2, 9))) for _ in range(3000)]
    cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(vocab))))
    names = [f"model-{i:02d}" for i in range(models)]
    cells = [(q, t, m) for q in range(1, questions + 1) for t in (1, 2) for m in names]
    for i in sorted(rng.sample(range(len(cells)), 39), reverse=True):
        del cells[i]
    with path.open("w", encoding="utf-8") as fh:
        for q, t, m in cells:
            score = rng.randint(1, 10)
            text = _text(rng, vocab, cum, text_chars) + f" Rating: [[{score}]]"
            fh.write(json.dumps({"question_id": q, "model": m, "judge": ["gpt-4", "single-v1"],
                                 "user_prompt": "[Question]...", "judgment": text, "score": score, "turn": t,
                                 "tstamp": 1.0}) + "\n")
    return len(cells)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--goal-s", type=float, default=10.0)
    ap.add_argument("--goal-mb", type=float, default=10.0)
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "gpt-4_single.jsonl"
        n = write_grades(src)
        ws = Path(tmp) / "ws"
        t0 = time.perf_counter()
        proc = subprocess.run([*ARENA, "import-judgments", str(src), "-w", str(ws)], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        db_mb = (ws / "arena.db").stat().st_size / 1e6
        print(json.dumps({"grades": n, "input_mb": round(src.stat().st_size / 1e6, 2), "import_s": round(seconds, 2),
                          "arena_db_mb": round(db_mb, 2), "stderr": proc.stderr.strip().splitlines()[:1]}))
        command, note = "python benchmarks/bench_import_grades.py", f"{n:,} FastChat single grades, 15 models"
        emit("import_grades.s", seconds, "s", "lower", command, note + "; arena import-judgments, start-up included",
             record_it=args.record)
        emit("import_grades.db_mb", db_mb, "MB", "lower", command, note + "; arena.db size", record_it=args.record)
    return 0 if seconds < args.goal_s and db_mb < args.goal_mb else 1


if __name__ == "__main__":
    sys.exit(main())
