"""The guard of the README's headline figures: run the quick benchmarks behind them, compare with the log.

``make bench-check`` (this script) runs, each as a subprocess, in at most about 2 minutes:

- ``bench_battle_stage.py --repeat 3``: the battle stage cold and warm (3,123 judge calls);
- ``bench_ratings.py --e2e-only``: ``arena ratings`` on 1,000,000 battles (wall, peak RSS, the fit);
- ``bench_import_grades.py``: ``arena import-judgments`` of 4,461 published grades (time, arena.db size);
- ``bench_report.py --runs 3``: ``arena report`` on 100,035 battles and its first render in headless
  Chromium (that figure only where Chromium and Playwright are installed).

Each prints its figures (``results.emit``); each figure is compared with its latest record in
``benchmarks/results.jsonl`` (``results.latest``, what the docs' results page shows). A figure more than
20% worse in its ``better`` direction is named, old -> new, with the command that reproduces it. It is a
benchmark, not a test: the exit status is 0 whatever the figures (CI's pass or fail never depends on
the machine's speed); 1 only when a benchmark could not run. ``--record`` appends the figures measured
now to the log (the new baseline); ``--only NAME`` runs some of the benchmarks.

    python benchmarks/bench_check.py [--record] [--only battle_stage] [--tolerance 0.2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import results

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Bench:
    """One quick benchmark behind headline figures: its name, its arguments, the figures it prints."""

    name: str
    args: tuple[str, ...]
    figures: tuple[str, ...]

    @property
    def script(self) -> Path:
        return HERE / f"bench_{self.name}.py"


BENCHES = (
    Bench("battle_stage", ("--repeat", "3"), ("battle_stage.cold_s", "battle_stage.warm_s")),
    Bench("ratings", ("--e2e-only",), ("ratings.e2e_s", "ratings.e2e_peak_mb", "ratings.fit_s")),
    Bench("import_grades", (), ("import_grades.s", "import_grades.db_mb")),
    Bench("report", ("--runs", "3"), ("report.build_s", "report.first_render_s")),
)


def run_bench(bench: Bench) -> tuple[list[results.Figure], float, str | None]:
    """Run ``bench`` as a subprocess; return (the figures it printed, its seconds, what it said).

    What it said is None when it failed (exited non-zero and printed no figure: its output is printed), else its
    last line that is not a figure (why a figure is missing: no browser, no data)."""
    src = str(HERE.parent / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(bench.script), *bench.args], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    figures = results.parse_emitted(proc.stdout)
    # a benchmark that misses its own goal exits 1 and still measured: only no figure at all is a failure
    if not figures and proc.returncode != 0:
        print(f"  could not run (exit {proc.returncode}, {seconds:.0f} s):\n{(proc.stdout + proc.stderr)[-3000:]}")
        return figures, seconds, None
    said = [line for line in proc.stdout.splitlines() if line.strip() and not line.startswith(results.EMITTED)]
    return figures, seconds, said[-1] if said else ""


def report(changes: list[results.Change], tolerance: float) -> list[results.Change]:
    """Print every figure beside its last record; return the ones that regressed."""
    regressed = []
    for c in changes:
        new = f"{c.new.value:.3g} {c.new.unit}"
        if c.old is None:
            print(f"  {c.new.figure:<26} {new:>10}   (no record yet: --record makes this the baseline)")
            continue
        worse = c.worse or 0.0
        mark = "REGRESSED" if c.regressed(tolerance) else "ok"
        print(f"  {c.new.figure:<26} {c.old.value:.3g} -> {new:<10} {-100 * worse:+6.1f}% "
              f"({'lower' if c.new.better == 'lower' else 'higher'} is better; recorded {c.old.date} at "
              f"{c.old.commit or '?'})  {mark}")
        if c.regressed(tolerance):
            regressed.append(c)
    return regressed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="append the figures measured now to results.jsonl")
    ap.add_argument("--only", action="append", choices=[b.name for b in BENCHES],
                    help="run only this benchmark (repeatable)")
    ap.add_argument("--tolerance", type=float, default=results.TOLERANCE,
                    help="how much worse than its record a figure may get before it is named (0.2: 20%%)")
    ap.add_argument("--log", type=Path, default=results.LOG, help="the results log to compare with and record to")
    args = ap.parse_args()
    t_all = time.perf_counter()
    benches = [b for b in BENCHES if not args.only or b.name in args.only]
    measured: list[results.Figure] = []
    broken = []
    for bench in benches:
        print(f"== {bench.script.name} {' '.join(bench.args)}", flush=True)
        figures, seconds, output = run_bench(bench)
        if output is None:
            broken.append(bench.name)
            continue
        for name in sorted(set(bench.figures) - {f.figure for f in figures}):
            print(f"  {name:<26} not measured here: {output}")
        measured.extend(figures)
        regressed_here = report(results.compare(figures, args.log), args.tolerance)
        print(f"  ({seconds:.0f} s)", flush=True)
        for c in regressed_here:
            print(f"  reproduce {c.new.figure}: {c.new.command}")
    regressed = [c for c in results.compare(measured, args.log) if c.regressed(args.tolerance)]
    print(f"\nbench-check: {len(measured)} figures in {time.perf_counter() - t_all:.0f} s; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if regressed:
        print(f"{len(regressed)} figures more than {100 * args.tolerance:.0f}% worse than their last record "
              "(other work on the cores counts too: reproduce on a quiet machine before believing one):")
        for c in regressed:
            assert c.old is not None and c.worse is not None  # regressed() needs a record
            print(f"  {c.new.figure}: {c.old.value:.3g} -> {c.new.value:.3g} {c.new.unit} "
                  f"({100 * c.worse:.0f}% worse; recorded {c.old.date} at {c.old.commit or '?'})\n"
                  f"    reproduce: {c.new.command}")
    else:
        print(f"no figure more than {100 * args.tolerance:.0f}% worse than its last record")
    if args.record:
        for m in measured:
            results.append(m, args.log)
        print(f"recorded {len(measured)} figures in {args.log}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
