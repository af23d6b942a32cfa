"""What a realistic hosted run costs, as `arena plan` prices it: an estimate at list prices, not a bill.

The run is ``examples/rate-endpoints.yaml`` as a user runs it: arena-hard's 500 questions, two models of yours
against the baseline gpt-4-0314 (its published answers imported, so only the judge and your own endpoints are
called), an LLM judge with arena-hard's template playing every pair in both orders, and the canaries. Your
endpoints are your own servers (priced at 0 here); the judge is a hosted model, once small and once large, each at
its provider's list price per million tokens. The plan counts the input tokens from the texts it will send and the
output tokens at ``max_tokens``, so each figure is an upper bound; the batch figure is the same calls at the
Batch API's price (half). The docs' cost table (``docs_tables.py``, block ``hosted-costs``) shows the latest
records.

    python benchmarks/bench_cost.py [--record]     # needs ../shared/data/arena-hard-v0.1 (examples/README.md)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (a script beside this one)

ARENA = [sys.executable, "-m", "arena_learning"]
CONFIG = "examples/rate-endpoints.yaml"
BASELINE = "../shared/data/arena-hard-v0.1/model_answer/gpt-4-0314.jsonl"
# (size, model, dollars per million input tokens, per million output tokens): the providers' list prices.
JUDGES = (("small", "gpt-4o-mini", 0.15, 0.60), ("large", "gpt-4o", 2.50, 10.00))


def _arena(*args: str) -> str:
    out = subprocess.run([*ARENA, *args], cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"arena {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def settings(model: str, price_in: float, price_out: float) -> list[str]:
    """Return the ``--set`` arguments that make the config's judge ``model`` at these prices."""
    return ["--set", f"judge.model.model={model}", "--set", f"judge.model.price_in={price_in}",
            "--set", f"judge.model.price_out={price_out}"]


def plan_costs(workspace: Path) -> list[dict]:
    """Return, per judge of ``JUDGES``, the plan's calls, tokens and cost (synchronous and batch)."""
    _arena("import-answers", BASELINE, "-w", str(workspace))
    rows = []
    for size, model, price_in, price_out in JUDGES:
        plan = json.loads(_arena("plan", CONFIG, "-w", str(workspace), "--json", *settings(model, price_in, price_out)))
        t = plan["totals"]
        rows.append({"size": size, "model": model, "price_in": price_in, "price_out": price_out,
                     "calls": t["calls"], "tokens_in": t["tokens_in"], "tokens_out": t["tokens_out"],
                     "cost": t["cost"], "cost_batch": t["cost_batch"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = ap.parse_args(argv)
    if not (REPO / BASELINE).is_file():
        raise SystemExit(f"{BASELINE} is missing: the data table of examples/README.md says where to get it")
    with tempfile.TemporaryDirectory() as tmp:
        rows = plan_costs(Path(tmp) / "ws")
    for r in rows:
        print(f"{r['size']:5} judge {r['model']:12} ${r['price_in']}/${r['price_out']} per 1M: {r['calls']} calls, "
              f"{r['tokens_in']:,} tokens in, at most {r['tokens_out']:,} out: at most ${r['cost']:.2f}, "
              f"${r['cost_batch']:.2f} in batches")
        if args.record:
            command = f"arena plan {CONFIG} {' '.join(settings(r['model'], r['price_in'], r['price_out']))}"
            note = (f"judge {r['model']} at ${r['price_in']} / ${r['price_out']} per million tokens in / out (list "
                    f"prices); {r['calls']} calls, {r['tokens_in']:,} tokens in, outputs at max_tokens "
                    f"({r['tokens_out']:,}): an upper bound; the two models of yours priced at 0")
            results.record(f"hosted_cost.{r['size']}_judge.usd", round(r["cost"], 2), "USD", "lower", command, note)
            results.record(f"hosted_cost.{r['size']}_judge.usd_batch", round(r["cost_batch"], 2), "USD", "lower",
                           command + " (the batch price)", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
