"""Generation throughput of the installed (portable) llama.cpp build against another build, e.g. a native one.

Both builds cannot share a process, so each runs the same measurement in its own interpreter,
in alternating rounds (llama.cpp's threads slow down badly when anything else wants a core;
alternating keeps the machine's load out of the ratio). Each round loads the bundled model and
times prompt evaluation (tokens/s over a 200-token prompt, no prefix cache) and generation
(tokens/s over 64 greedy tokens). Prints both figures per build and the ratio portable / other
(goal: a portable build costs at most 20% of generation speed).

    python benchmarks/bench_llama_build.py --other-python /tmp/native-venv/bin/python [--rounds 3]

Make the other build with, for example:
    python -m venv /tmp/native-venv && CMAKE_ARGS="-DGGML_NATIVE=ON" /tmp/native-venv/bin/pip install \\
        --no-cache-dir llama-cpp-python==0.3.36
Without --other-python it prints the installed build's figures only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

MEASURE = r'''
import json, os, sys, time
import llama_cpp
from llama_cpp import Llama
path = sys.argv[1]
llm = Llama(model_path=path, n_ctx=512, n_threads=os.cpu_count() or 1, verbose=False)
prompt = " ".join(f"Question: What is {i} + {i + 3}? Answer: {2 * i + 3}." for i in range(20))
toks = llm.tokenize(prompt.encode())
llm.create_completion(prompt="warm up", max_tokens=4, temperature=0.0)
best_pp = best_tg = 0.0
for _ in range(3):
    llm.reset()
    t0 = time.perf_counter(); llm.eval(toks); pp = len(toks) / (time.perf_counter() - t0)
    llm.reset()
    t0 = time.perf_counter()
    out = llm.create_completion(prompt="Once upon a time", max_tokens=64, temperature=0.0, stop=[])
    n = out["usage"]["completion_tokens"]; tg = n / (time.perf_counter() - t0)
    best_pp, best_tg = max(best_pp, pp), max(best_tg, tg)
info = llama_cpp.llama_print_system_info()
info = info.decode() if isinstance(info, bytes) else str(info)
print(json.dumps({"prompt_tps": best_pp, "gen_tps": best_tg, "system_info": info.strip()}))
'''


def measure(python: str, model: str) -> dict:
    proc = subprocess.run([python, "-c", MEASURE, model], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{python}: the measurement failed ({proc.returncode}): {proc.stderr[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other-python", help="interpreter of an environment with another llama-cpp-python build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--goal", type=float, default=0.8, help="minimum generation-speed ratio portable / other")
    args = ap.parse_args()
    from arena_learning.engines.bundled import bundled_model_path

    model = str(bundled_model_path())
    sides = {"installed": sys.executable}
    if args.other_python:
        sides["other"] = args.other_python
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            runs[name].append(measure(sides[name], model))
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("prompt_tps", "gen_tps")} for k, v in runs.items()}
    for name, v in runs.items():
        print(f"{name:9s} prompt {med[name]['prompt_tps']:8.1f} tok/s   generation {med[name]['gen_tps']:6.1f} tok/s"
              f"   ({v[0]['system_info']})")
    if "other" not in med:
        return 0
    pp = med["installed"]["prompt_tps"] / med["other"]["prompt_tps"]
    tg = med["installed"]["gen_tps"] / med["other"]["gen_tps"]
    print(f"ratio installed / other: prompt {pp:.2f}, generation {tg:.2f} (goal generation >= {args.goal})")
    return 0 if tg >= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
