"""Benchmark: one flywheel config over several draws, and issue 18's goals counted per draw.

Run: ``python benchmarks/bench_draws.py [CONFIG] [--draws 0,1,2] [-w ROOT] [--set key=value ...] [--quick]``

A flywheel run is deterministic, so one run's table is one draw of its training slices and sample
seeds: whether a config "keeps rising" is a claim about many draws. Draw 0 is CONFIG as written
(examples/flywheel-same-weights.yaml by default); draw d > 0 moves every pool slice's seed by 1000 d and
``harvest.samples.seed`` by d. The test set stays, so every draw's models are rated on the same prompts.
Each draw is ``arena flywheel CONFIG -w ROOT/draw-d --json --set ...`` in a process of its own (a rerun with
the same ROOT resumes it; a finished draw costs seconds).

Printed per draw: each round's paired delta to the round before (95% CI, both rated on each bootstrap
resample of the test prompts) and exact answers; the last round against the round two before it,
paired (``arena leaderboard WS --diff``); the union of the references' exact answers; the shortcut
check on the last round's answers; minutes. Then, across draws, how many meet each of issue 18's goals
(every round's delta positive; the last round above the one two before with a CI above 0; 1.3x its exact
answers; above the references' union; no shortcut) and per round the mean and range of exact answers.
Figures are printed, not asserted: it is not a timed test. ``--quick`` shrinks everything (24 test
prompts, slices of 12, one step per stage) to check the script end to end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena_learning.cli.rating import workspace_diff
from arena_learning.config import load_config_file
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.rating.paired import exact_answers
from arena_learning.store import DEFAULT_SET, Store

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["tasks.n=24", "ratings.bootstrap=20", "training.sft.max_steps=1", "training.dpo.max_steps=1",
         "training.rl.max_steps=1", "training.sft.save_steps=1"]
SEED_STEP = 1000
GOAL_RATIO = 1.3


def draw_sets(cfg: FlywheelConfig, draw: int) -> list[str]:
    """Return the ``--set`` overrides that make draw ``draw`` of ``cfg``: its slices' and samples' seeds moved."""
    if draw == 0:
        return []
    stored = [name for name, spec in cfg.pool.items() if spec.set is not None]
    if stored:
        raise SystemExit(f"pool slices {', '.join(stored)} are stored prompt sets: a draw moves task-suite seeds, "
                         "so only draw 0 runs on them (or give those slices task prompts: n and seed)")
    sets = [f"pool.{name}.seed={cfg.slice_seed(pos, spec) + SEED_STEP * draw}"
            for pos, (name, spec) in enumerate(cfg.pool.items())]
    if cfg.harvest.samples is not None:
        sets.append(f"harvest.samples.seed={cfg.harvest.samples.seed + draw}")
    return sets


@dataclass
class DrawResult:
    """What one draw's run says against issue 18's goals."""

    draw: int
    minutes: float
    deltas: list[tuple[float, float | None, float | None]] = field(default_factory=list)
    exact: list[int] = field(default_factory=list)  # per round, round 0 first
    base_exact: int | None = None
    of: int = 0
    span: dict[str, Any] = field(default_factory=dict)  # the last round against the one two before: --diff
    union_refs: int = 0
    shortcuts: list[str] = field(default_factory=list)

    def goals(self) -> dict[str, bool]:
        last, back = self.exact[-1], (self.exact[-3] if len(self.exact) >= 3 else None)
        low = self.span.get("ci_low")
        return {"every delta > 0": bool(self.deltas) and all(d[0] > 0 for d in self.deltas),
                "last vs two before: CI > 0": low is not None and low > 0,
                f"{GOAL_RATIO}x exact of two before": back is not None and last >= GOAL_RATIO * back,
                "above the references' union": last > self.union_refs,
                "no shortcut": not self.shortcuts}


def measure(report: dict[str, Any], ws: Path, draw: int, minutes: float) -> DrawResult:
    """Return draw ``draw``'s figures from its ``arena flywheel --json`` report and its workspace."""
    out = DrawResult(draw, minutes)
    rounds = report["rounds"]
    for r in rounds:
        d = r.get("delta_prev")
        if d is not None:
            out.deltas.append((d["rating"], d.get("ci_low"), d.get("ci_high")))
        if r.get("exact") is not None:
            out.exact.append(r["exact"]["n"])
            out.of = r["exact"]["of"]
    if (report.get("base") or {}).get("exact") is not None:
        out.base_exact = report["base"]["exact"]["n"]
    out.shortcuts = list(rounds[-1].get("shortcuts") or [])
    if len(rounds) >= 3:
        _, diff, _, _ = workspace_diff(ws, rounds[-1]["model"], rounds[-3]["model"])
        out.span = {"vs": rounds[-3]["model"], "rating": diff.delta.rating, "ci_low": diff.delta.ci_low,
                    "ci_high": diff.delta.ci_high, "p_better": diff.delta.p_better}
    with Store(ws, readonly=True) as store:
        correct = exact_answers(store.get_prompts(DEFAULT_SET), store.get_answers(set_name=DEFAULT_SET))
    refs = [r["model"] for r in report["references"]]
    out.union_refs = len({pid for m in refs for pid, ok in (correct.get(m) or {}).items() if ok})
    return out


def run_flywheel(config: str, ws: Path, sets: list[str], what: str) -> tuple[dict[str, Any], float]:
    """Run ``arena flywheel CONFIG -w WS --json --set ...`` in a process of its own; return its report and minutes.

    In one process, the llama.cpp contexts a run leaves behind can batch a later run's requests otherwise (see
    docs/results.md, the four draws). A failed run stops the benchmark, naming ``what`` and the workspace (which
    resumes)."""
    cmd = [sys.executable, "-m", "arena_learning", "flywheel", config, "-w", str(ws), "--json",
           *(x for kv in sets for x in ("--set", kv))]
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what}: arena flywheel exited with {done.returncode} (its log is above; the workspace "
                         f"{ws} resumes)")
    return json.loads(done.stdout), (time.perf_counter() - started) / 60


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f" [{lo:+.0f}, {hi:+.0f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "flywheel-same-weights.yaml"))
    ap.add_argument("--draws", default="0,1,2", help="comma-separated draw numbers (0: the config as written)")
    ap.add_argument("-w", "--workspace", default=None, help="root of the draws' workspaces (default: temporary)")
    ap.add_argument("--set", action="append", default=[], help="override a config field (every draw)")
    ap.add_argument("--quick", action="store_true", help="tiny sets and one step per stage: a check, not figures")
    args = ap.parse_args(argv)
    try:
        draws = [int(x) for x in args.draws.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--draws {args.draws!r}: write draw numbers separated by commas, e.g. 0,1,2")
    if not draws or any(d < 0 for d in draws):
        ap.error(f"--draws {args.draws!r}: give at least one draw number, none below 0")
    sets = [*(QUICK if args.quick else []), *args.set]
    base = load_config_file(args.config, FlywheelConfig, sets)
    if args.quick:
        sets += [f"pool.{name}.n=12" for name in base.pool]
    root = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="bench-draws-"))
    results: list[DrawResult] = []
    for d in draws:
        ws = root / f"draw-{d}"
        report, minutes = run_flywheel(args.config, ws, [*sets, *draw_sets(base, d)], f"draw {d}")
        results.append(measure(report, ws, d, minutes))
        print(f"[bench] draw {d}: {results[-1].minutes:.1f} min, workspace {ws}", flush=True)

    print(f"\n{'draw':>4}  {'paired delta of each round to the one before [95% CI]':60} {'exact per round':26} "
          f"{'last vs two before':>22} {'refs':>5}  shortcuts of the last")
    for x in results:
        deltas = ", ".join(f"{r:+.1f}{_ci(lo, hi)}" for r, lo, hi in x.deltas)
        span = "-" if not x.span else f"{x.span['rating']:+.1f}{_ci(x.span['ci_low'], x.span['ci_high'])}"
        exact = " -> ".join(map(str, ([] if x.base_exact is None else [x.base_exact]) + x.exact))
        print(f"{x.draw:>4}  {deltas:60} {exact:26} {span:>22} {x.union_refs:>5}  "
              f"{'; '.join(x.shortcuts) or 'none'}")
    print(f"\nissue 18's goals, draws meeting each (of {len(results)}):")
    for goal in results[0].goals():
        met = [x.draw for x in results if x.goals()[goal]]
        print(f"  {goal:32} {len(met)}  {'draws ' + ','.join(map(str, met)) if met else ''}")
    rounds = min(len(x.exact) for x in results)
    print(f"\nexact answers of {results[0].of} per round across draws (mean, min-max):")
    for i in range(rounds):
        col = [x.exact[i] for x in results]
        print(f"  round {i:<2} {sum(col) / len(col):6.1f}  {min(col)}-{max(col)}")
    spans = [x.span["rating"] for x in results if x.span]
    if spans:
        print(f"last round against the one two before, rating difference: mean {sum(spans) / len(spans):+.1f}, "
              f"{sum(s > 0 for s in spans)} of {len(spans)} draws above 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
