"""arena plan's minutes against a real run's: per model (an arena run) or per phase (a flywheel), and in all.

The plan is made first, on a workspace that does not exist yet (nothing cached), with the rates this machine has
measured (``--measure``: measured now, as ``arena plan --measure`` does); then the config runs as a user runs it
(``arena run`` / ``arena flywheel`` in a fresh process, timed whole); then each predicted figure is set beside the
run's own record: the seconds each contestant's answers took (the workspace's ``answer_stats``), or a flywheel's
seconds per phase (its state: the slices' answers and battles, the evaluations on the test set, the training) and
its wall time. Issue 36's goal: within 25% on a quiet machine.

``--from-run WS --plan-json FILE`` compares a plan saved before (``arena plan ... --json``) with a run already made
in WS (a flywheel of 20 minutes need not run twice).

    python benchmarks/bench_plan_minutes.py examples/quickstart.yaml [--measure] [--record]
    python benchmarks/bench_plan_minutes.py examples/flywheel.yaml --from-run WS --plan-json plan.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (a script beside this one)

ARENA = [sys.executable, "-m", "arena_learning"]
GOAL = 0.25


def plan(config: Path, ws: Path, measure: bool) -> dict:
    out = subprocess.run([*ARENA, "plan", str(config), "-w", str(ws), "--json", *(["--measure"] if measure else [])],
                         capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"arena plan failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def predicted_phases(p: dict) -> dict[str, float]:
    """Return the plan's seconds per phase as a flywheel's state records them (slice answers, evaluations,
    training; a line not timed counts 0 and is named in ``untimed``)."""
    phases: dict[str, float] = defaultdict(float)
    for x in p["lines"]:
        seconds = x["seconds"] or 0.0
        if x["step"] == "train":
            phases["train"] += seconds
        elif x["stage"].startswith("evaluate after") or x["stage"] == "test set":
            phases["evaluate"] += seconds
        else:
            phases["answer_battle"] += seconds
    return dict(phases)


def actual_run(ws: Path) -> dict[str, float]:
    db = sqlite3.connect(f"file:{ws / 'arena.db'}?mode=ro", uri=True)
    (value,) = db.execute("SELECT value FROM meta WHERE key = 'answer_stats'").fetchone()
    return {name: s.get("seconds", 0.0) for name, s in json.loads(value).items()}


def actual_flywheel(ws: Path) -> dict[str, float]:
    state = json.loads((ws / "flywheel" / "state.json").read_text())
    phases: dict[str, float] = defaultdict(float)
    for rec in state["stages"].values():
        for k, v in rec.get("seconds", {}).items():
            if v is not None and k != "harvest":
                phases[k] += v
    phases["evaluate"] = sum(e.get("seconds", 0.0) for e in state.get("evaluations", []))
    return dict(phases)


def line(name: str, want: float, got: float) -> float:
    off = (want - got) / got if got else float("inf")
    print(f"  {name:<28} planned {want:8.1f} s   ran {got:8.1f} s   {off:+.0%}")
    return off


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--measure", action="store_true", help="measure the config's models first (arena plan --measure)")
    ap.add_argument("--from-run", type=Path, help="a workspace the config already ran in (no run now)")
    ap.add_argument("--plan-json", type=Path, help="with --from-run: the plan made before that run")
    ap.add_argument("--wall", type=float, help="with --from-run: the run's wall seconds, if known")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    data = yaml.safe_load(args.config.read_text())
    flywheel = isinstance(data, dict) and ("rounds" in data or "pool" in data)
    wall = args.wall
    if args.from_run is not None:
        if args.plan_json is None:
            ap.error("--from-run needs --plan-json (the plan made before that run)")
        p, ws = json.loads(args.plan_json.read_text()), args.from_run
    else:
        ws = Path(tempfile.mkdtemp(prefix="bench-plan-")) / "ws"
        p = plan(args.config, ws, args.measure)
        t0 = time.perf_counter()
        cmd = [*ARENA, "flywheel" if flywheel else "run", str(args.config), "-w", str(ws)]
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
    print(f"{args.config} (workspace {ws}); plan untimed: {p['totals']['minutes']['untimed']}")
    offs = []
    if flywheel:
        want, got = predicted_phases(p), actual_flywheel(ws)
        for k in ("answer_battle", "evaluate", "train"):
            offs.append(line(k, want.get(k, 0.0), got.get(k, 0.0)))
        total_want, total_got = sum(want.values()), sum(got.values())
    else:
        got = actual_run(ws)
        want = {x["model"]: x["seconds"] or 0.0 for x in p["lines"] if x["step"] == "answer"}
        for k in want:
            offs.append(line(k, want[k], got.get(k, 0.0)))
        total_want, total_got = sum(want.values()), sum(got.values())
    total = line("in all", total_want, total_got)
    if wall:
        print(f"  wall time of the run: {wall:.1f} s (planned phases {total_want:.1f} s: {total_want / wall:.0%})")
    worst = max(abs(o) for o in offs)
    print(f"worst phase off by {worst:.0%}, the total by {total:+.0%} (goal: within {GOAL:.0%})")
    cmd = f"python benchmarks/bench_plan_minutes.py {args.config}"
    results.emit(f"plan minutes off ({args.config.stem})", round(abs(total) * 100, 1), "%", "lower", cmd,
                 note=f"planned {total_want:.0f} s, ran {total_got:.0f} s; worst phase {worst:.0%}",
                 record_it=args.record)
    return 0 if abs(total) <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
