"""Benchmark: RIP (Rejecting Instruction Preferences, arXiv 2501.18578) on a flywheel's preference pairs.

Run: ``python benchmarks/bench_rip.py WORKSPACE [--k K]`` on the workspace of a finished flywheel of the built-in
task suite (e.g. ``arena flywheel examples/flywheel.yaml``, or an arm of ``bench_aim.py``).

``harvest.rip`` (off by default) drops DPO / reward-model pairs whose rejected answer scores low, is short, or
lies too far below the chosen one: in RIP's reading, signs of a prompt that teaches little. This script harvests
every slice's pairs as the flywheel does (most wins chosen, fewest wins rejected, score gap above K) with RIP off
and under each rule alone, and grades each pair with the task suite's checker, which knows the right answer:

- **clean**: the chosen answer is exactly right and the rejected one is not (what a preference should teach);
- **noisy**: the chosen answer is not exactly right (a partly right answer preferred: it teaches an error).

Printed per setting: pairs kept, clean and noisy pairs kept, and the clean and noisy pairs it dropped, per slice
and in all; then the kept pairs per category. A rule serves where it drops noisy pairs and keeps clean ones.
Figures are printed, not asserted: a data-level measurement (no training).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from arena_learning.errors import ArenaError
from arena_learning.flywheel.harvest import PreferenceItem, RipFilter, harvest_pairs
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.flywheel.slices import slice_set
from arena_learning.records import Prompt
from arena_learning.store import Store
from arena_learning.tasks.checks import check

SETTINGS: dict[str, RipFilter | None] = {
    "off": None,
    "rejected score >= 1": RipFilter(min_rejected_score=1.0),
    "rejected length >= 2": RipFilter(min_rejected_length=2),
    "gap <= 9": RipFilter(max_gap=9.0),
}
"""RIP off, then each of its three rules alone, at thresholds that bite on the task suite's 0-10 checker scores
(a rejected answer scoring 0 or of one character; a gap of 10, exactly right against entirely wrong)."""


def grade(item: PreferenceItem, prompt: Prompt) -> str:
    """Return ``clean``, ``noisy`` or ``other`` (both right: not a preference the checker can judge)."""
    chosen = [m["content"] for m in item.chosen if m["role"] == "assistant"]
    rejected = [m["content"] for m in item.rejected if m["role"] == "assistant"]
    right_c, right_r = check(prompt, chosen) == 10.0, check(prompt, rejected) == 10.0
    if not right_c:
        return "noisy"
    return "clean" if not right_r else "other"


def slice_pairs(store: Store, cfg: FlywheelConfig, name: str, k: float, rip: RipFilter | None
                ) -> list[PreferenceItem]:
    """Return the pairs of slice ``name`` as the flywheel harvests them, under ``rip``."""
    set_name = slice_set(name)
    prompts = store.get_prompts(set_name)
    answers = store.get_answers(set_name=set_name)
    battles = store.get_battles(cfg.judge.name, set_name)
    models = sorted({a.model for a in answers})
    return harvest_pairs(prompts, answers, battles, models=models, k=k, rip=rip, slice_name=name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspace", type=Path)
    ap.add_argument("--k", type=float, default=None, help="score gap a pair must pass (default: the run's harvest.k)")
    args = ap.parse_args(argv)
    if not (args.workspace / "arena.db").is_file():
        raise SystemExit(f"{args.workspace}: no arena.db: give the workspace of a finished flywheel")
    with Store(args.workspace, readonly=True) as store:
        saved = store.get_meta("flywheel_config")
        if not isinstance(saved, dict):
            raise SystemExit(f"{args.workspace}: not a flywheel's workspace (no flywheel config stored)")
        cfg = FlywheelConfig.model_validate(saved)
        k = cfg.harvest.k if args.k is None else args.k
        slices = [n for n in cfg.pool if store.get_battles(cfg.judge.name, slice_set(n))]
        if not slices:
            raise SystemExit(f"{args.workspace}: no slice has battles yet")
        by_id = {p.id: p for n in slices for p in store.get_prompts(slice_set(n))}
        try:
            pairs = {s: {n: slice_pairs(store, cfg, n, k, rip) for n in slices} for s, rip in SETTINGS.items()}
        except (ArenaError, ValueError) as err:
            raise SystemExit(f"{args.workspace}: {err}") from None
    grades = {(it.slice, it.prompt_id): grade(it, by_id[it.prompt_id]) for it in
              (x for per in pairs["off"].values() for x in per)}
    print(f"RIP on {args.workspace}: slices {', '.join(slices)}; score gap above {k:g}; judge {cfg.judge.name}")
    print(f"{'setting':22s} {'slice':6s} {'kept':>5s} {'clean':>6s} {'noisy':>6s} {'dropped clean':>14s} "
          f"{'dropped noisy':>14s}")
    for s in SETTINGS:
        for n in [*slices, "all"]:
            kept = ([x for per in pairs[s].values() for x in per] if n == "all" else pairs[s][n])
            base = ([x for per in pairs["off"].values() for x in per] if n == "all" else pairs["off"][n])
            keys = {(x.slice, x.prompt_id) for x in kept}
            c = Counter(grades.get((x.slice, x.prompt_id), "other") for x in kept)
            dropped = Counter(grades[(x.slice, x.prompt_id)] for x in base if (x.slice, x.prompt_id) not in keys)
            print(f"{s:22s} {n:6s} {len(kept):5d} {c['clean']:6d} {c['noisy']:6d} {dropped['clean']:14d} "
                  f"{dropped['noisy']:14d}")
    print("\nkept pairs per category (clean / noisy):")
    cats = sorted({by_id[x.prompt_id].category or "-" for per in pairs["off"].values() for x in per})
    print(f"{'setting':22s} " + " ".join(f"{c[:10]:>10s}" for c in cats))
    for s in SETTINGS:
        kept = [x for per in pairs[s].values() for x in per]
        cells = []
        for cat in cats:
            g = Counter(grades.get((x.slice, x.prompt_id), "other") for x in kept
                        if (by_id[x.prompt_id].category or "-") == cat)
            cells.append(f"{g['clean']:>4d} / {g['noisy']:<3d}")
        print(f"{s:22s} " + " ".join(f"{c:>10s}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
