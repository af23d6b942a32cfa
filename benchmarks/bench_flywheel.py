"""Benchmark: the flywheel quickstart, end to end, with its figures.

Run: ``python benchmarks/bench_flywheel.py [CONFIG] [-w WORKSPACE] [--set key=value ...] [--baselines random,longest]``

Runs ``arena flywheel`` (examples/flywheel-same-weights.yaml by default) in a fresh workspace (or resumes the
given one) and prints, from the run and its state file:

- wall time of the whole run, of each round, and of each stage (answering and judging the slice,
  harvesting, training) and of each test-set evaluation;
- training: examples, optimizer steps, seconds per step, final loss, peak memory (max RSS of the
  process; training, llama.cpp and transformers all run in it);
- data per round: SFT examples, DPO pairs, reward-model pairs, and which reference supplied them;
- ratings per round with 95% CIs, the references', and whether the last round's model is above
  round 0's (and above the best reference) by more than both CIs.

Figures are printed, not asserted: it is not a timed test. A first run on a machine also pays the
one-time GGUF -> safetensors conversion of the bundled model (about a minute), printed apart.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from arena_learning.config import load_config_file
from arena_learning.engines.bundled import cache_dir
from arena_learning.engines.transformers_engine import BUNDLED_HF_NAME, bundled_hf_folder
from arena_learning.flywheel.rounds import run_flywheel, save_flywheel_config
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.flywheel_state import RatedModel, RoundRow, StageRecord, load_state, state_path
from arena_learning.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _ci(row: RatedModel | RoundRow | StageRecord) -> str:
    if row.rating is None:
        return "-"
    lo, hi = row.ci_low, row.ci_high
    return f"{row.rating:.1f} ({lo:.1f}..{hi:.1f})" if lo is not None and hi is not None else f"{row.rating:.1f}"


def above(a: RatedModel | RoundRow, b: RatedModel | RoundRow) -> bool:
    """Whether ``a`` is above ``b`` by more than both CIs: a's lower bound over b's upper bound."""
    return a.ci_low is not None and b.ci_high is not None and a.ci_low > b.ci_high


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "flywheel-same-weights.yaml"))
    ap.add_argument("-w", "--workspace", default=None, help="workspace (default: a fresh temporary one)")
    ap.add_argument("--set", action="append", default=[], help="override a config field")
    ap.add_argument("--baselines", default=None, help="comma-separated ablation baselines")
    args = ap.parse_args(argv)

    cfg = load_config_file(args.config, FlywheelConfig, args.set)
    ws = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="bench-flywheel-"))
    converted = (cache_dir() / BUNDLED_HF_NAME).is_dir()
    t0 = time.perf_counter()
    bundled_hf_folder()
    conversion = time.perf_counter() - t0
    print(f"bundled GGUF -> safetensors: {'cached' if converted else f'{conversion:.0f} s (once per machine)'}")

    started = time.perf_counter()
    with Store(ws) as store:
        save_flywheel_config(cfg, store)
        baselines = [b for b in args.baselines.split(",") if b] if args.baselines else None
        report = run_flywheel(cfg, store, baselines=baselines)
    wall = time.perf_counter() - started
    state = load_state(state_path(ws))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"\nflywheel {cfg.name}: {len(cfg.rounds)} rounds in {wall:.0f} s ({wall / 60:.1f} min), "
          f"peak RSS {peak:.0f} MB,"
          f" workspace {ws}")
    for k, run in enumerate(state.runs):
        print(f"  run {k + 1}: {run.seconds:.0f} s ({run.seconds / 60:.1f} min)"
              + ("" if run.trained else ", resumed with nothing left to train"))
    print("\nslices:", ", ".join(f"{k} {v.prompts} prompts" for k, v in state.slices.items()))
    print("\nstages:")
    print(f"  {'stage':16} {'data':>5} {'steps':>5} {'s/step':>7} {'loss':>7} {'answer+judge s':>15} {'harvest s':>9} "
          f"{'train s':>8} {'peak MB':>8}  by model")
    per_round: dict[int, float] = {}
    for key, rec in state.stages.items():
        sec, tr = rec.seconds, rec.train
        per_round[rec.round] = per_round.get(rec.round, 0.0) + sum(sec.spent().values())
        sps = f"{tr.s_per_step:.2f}" if tr is not None and tr.s_per_step else "-"
        loss = f"{rec.train_loss:.3f}" if rec.train_loss is not None else "-"
        print(f"  {key:16} {rec.examples:5d} {tr.steps if tr else 0:5d} {sps:>7} {loss:>7} "
              f"{sec.answer_battle or 0:15.1f} {sec.harvest or 0:9.2f} {sec.train or 0:8.1f} "
              f"{tr.peak_rss_mb if tr else 0:8.0f}  {rec.by_model}")
    print("\nevaluations on the test set:")
    for ev in state.evaluations:
        print(f"  after {ev.after}: {ev.seconds:.1f} s")
    print("\nper round (stages, without evaluations):", ", ".join(f"round {r} {s:.0f} s" for r, s in per_round.items()))
    print("\nratings (95% CI):")
    if report.base:
        print(f"  start    {report.base.model:22} {_ci(report.base)}")
    for r in report.rounds:
        print(f"  round {r.round}  {r.model:22} {_ci(r)}   sft {r.sft_examples}  dpo {r.dpo_pairs}  "
              f"rm {r.rm_pairs}  loss {r.train_loss}")
    for ref in report.references:
        print(f"  ref      {ref.model:22} {_ci(ref)}")
    for a in report.ablations:
        print(f"  ablation {a.model:22} {_ci(a)}  ({a.selection}, {a.examples} examples)")
    first, last = report.rounds[0], report.rounds[-1]
    best = max(report.references, key=lambda r: r.rating or float("-inf"))
    print(f"\nlast round above round 0 beyond both CIs: {above(last, first)}")
    print(f"last round above the best reference ({best.model}) beyond both CIs: {above(last, best)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
