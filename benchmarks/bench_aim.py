"""Benchmark: an aimed flywheel (allocate: weakness or learnable) against uniform slices of the same size, same draw.

Run: ``python benchmarks/bench_aim.py [CONFIG] [--draw D] [-w ROOT] [--set key=value ...] [--replicate] [--quick]``

CONFIG (examples/flywheel-aimed.yaml by default) has stages with ``allocate: weakness`` (or ``learnable``).
Two arms run it: **aimed**, as written, and **uniform**, the same config with each of those stages set to ``allocate:
even``: its slices are drawn from the same candidates, evenly, so the arms differ only in how each slice
spends its prompts (with no gap anywhere, both draw the same prompts). Each arm is ``arena flywheel CONFIG -w
ROOT/draw-D/ARM --json`` in a process of its own (a rerun with the same ROOT resumes it). ``--draw D`` moves
every slice's seed by 1000 D, as ``bench_draws.py`` does.

Printed: each arm's rounds (paired delta to the round before, exact answers, the gap to the best
reference); the final models against each other, paired by test prompt (exact answers of the aimed arm's
last model minus the uniform arm's, mean difference with a 95% percentile bootstrap CI over the test prompts),
and each round's models the same way;
per category the prompts the aimed arm gained and lost against the uniform one, and how each aimed slice was
spent; the shortcut check of each arm's last round; minutes per arm (the goal: aiming costs at most 10% more).
Figures are printed, not asserted. ``--quick`` shrinks everything to check the script end to end.

``--replicate`` runs a third arm, **repeat**: the uniform arm again with every trainer's seed + 1 (the same
slices; only data order and LoRA initialisation change), and prints it against the uniform arm as the aimed arm
is. The paired CI covers the test prompts, not the training's own randomness; the repeat arm's delta shows how
far two arms that differ in nothing that matters land apart (docs/experiments.md has it measured), which is the
size an aimed arm's lead has to clear before it means anything.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from arena_learning.config import load_config_file
from arena_learning.flywheel.aim import AIMED_RULES
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.rating.paired import exact_answers, exact_count
from arena_learning.store import DEFAULT_SET, Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_draws import run_flywheel

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["tasks.n=48", "ratings.bootstrap=20", "training.sft.max_steps=1", "training.dpo.max_steps=1",
         "training.rl.max_steps=1", "training.sft.save_steps=1"]
ARMS = ("uniform", "aimed")
REPEAT = "repeat"
TRAINERS = ("sft", "dpo", "rm", "rl")
BOOTSTRAP = 2000


def uniform_sets(cfg: FlywheelConfig) -> list[str]:
    """Return the ``--set`` overrides that make the uniform arm: every aimed stage drawn evenly instead."""
    sets = [f"rounds.{r}.stages.{i}.allocate=even" for r, rnd in enumerate(cfg.rounds)
            for i, st in enumerate(rnd.stages) if st.allocate in AIMED_RULES]
    if not sets:
        raise SystemExit("no stage of the config has allocate: weakness or learnable: there is no aimed arm to compare "
                         "(see examples/flywheel-aimed.yaml)")
    return sets


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, FlywheelConfig, dict[str, list[str]]]:
    """Return the arguments, the config as the aimed arm runs it, and each arm's ``--set`` overrides."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "flywheel-aimed.yaml"))
    ap.add_argument("--draw", type=int, default=0, help="move every slice's seed by 1000 x DRAW (0: as written)")
    ap.add_argument("-w", "--workspace", default=None, help="root of the arms' workspaces (default: temporary)")
    ap.add_argument("--set", action="append", default=[], help="override a config field (both arms)")
    ap.add_argument("--quick", action="store_true", help="tiny sets and one step per stage: a check, not figures")
    ap.add_argument("--replicate", action="store_true", help="a third arm: the uniform one with the trainers' seeds "
                    "+ 1, against it (the training's own noise)")
    args = ap.parse_args(argv)
    if args.draw < 0:
        ap.error(f"--draw {args.draw}: give a draw number of 0 or more")
    sets = [*(QUICK if args.quick else []), *args.set]
    cfg = load_config_file(args.config, FlywheelConfig, sets)
    if args.quick:
        sets += [f"pool.{name}.n=24" for name in cfg.pool]
    if args.draw:
        stored = [name for name, spec in cfg.pool.items() if spec.set is not None]
        if stored:
            ap.error(f"--draw {args.draw}: slices {', '.join(stored)} are stored prompt sets; a draw moves task-suite "
                     "seeds (use draw 0)")
        sets += [f"pool.{name}.seed={cfg.slice_seed(pos, spec) + 1000 * args.draw}"
                 for pos, (name, spec) in enumerate(cfg.pool.items())]
    arms = {"uniform": [*sets, *uniform_sets(cfg)], "aimed": sets}
    if args.replicate:
        arms[REPEAT] = [*arms["uniform"], *(f"training.{kind}.seed={getattr(cfg.training, kind).seed + 1}"
                                            for kind in TRAINERS)]
    return args, cfg, arms


def paired_exact(aimed: dict[str, bool], uniform: dict[str, bool], seed: int = 0) -> tuple[float, float, float, int]:
    """Return (mean exact difference aimed - uniform over the shared test prompts, 95% CI low, high, prompts)."""
    ids = sorted(set(aimed) & set(uniform))
    if not ids:
        return 0.0, 0.0, 0.0, 0
    d = np.array([int(aimed[i]) - int(uniform[i]) for i in ids], dtype=np.float64)  # (P,)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(BOOTSTRAP, len(d)))].mean(axis=1)  # (BOOTSTRAP,)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi), len(ids)


def last_exact(ws: Path, model: str) -> tuple[dict[str, bool], dict[str, str | None]]:
    """Return the test prompts ``model`` answers exactly in workspace ``ws``, and each prompt's category."""
    with Store(ws, readonly=True) as store:
        prompts = store.get_prompts(DEFAULT_SET)
        correct = exact_answers(prompts, store.get_answers(model, DEFAULT_SET))
    return correct.get(model, {}), {p.id: p.category for p in prompts}


def _d(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    ci = "" if d.get("ci_low") is None else f" [{d['ci_low']:+.0f}, {d['ci_high']:+.0f}]"
    return f"{d['rating']:+.1f}{ci}"


def verdict(lo: float, hi: float) -> str:
    return "above 0" if lo > 0 else "below 0" if hi < 0 else "within chance"


def paired_rounds(reports: dict[str, dict[str, Any]], workspaces: dict[str, Path], arm: str) -> str:
    """Return ``arm``'s model of each round against the uniform arm's of the same round, paired by test prompt,
    and whether the last round's CI is above 0, below it or within chance."""
    rows, last = [], "no round"
    for mine, theirs in zip(reports[arm]["rounds"], reports["uniform"]["rounds"]):
        mean, lo, hi, _ = paired_exact(last_exact(workspaces[arm], mine["model"])[0],
                                       last_exact(workspaces["uniform"], theirs["model"])[0])
        rows.append(f"round {mine['round']} {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]")
        last = f"{verdict(lo, hi)} at the last"
    return f"{'; '.join(rows)} ({last})"


def report(reports: dict[str, dict[str, Any]], workspaces: dict[str, Path], minutes: dict[str, float]) -> None:
    """Print the arms side by side and the aimed arm's final model against the uniform one's (and the repeat's)."""
    for arm in reports:
        rep = reports[arm]
        print(f"\n{arm} ({minutes[arm]:.1f} min, {workspaces[arm]}):")
        for r in rep["rounds"]:
            ex = r.get("exact") or {}
            print(f"  round {r['round']}: vs round before {_d(r.get('delta_prev')):>20}  vs best reference "
                  f"{_d(r.get('delta_best_ref')):>20}  exact {ex.get('n', '-')}/{ex.get('of', '-')}")
        print(f"  shortcuts of the last round: {'; '.join(rep['rounds'][-1].get('shortcuts') or []) or 'none'}")
        for name, sl in rep.get("slices", {}).items():
            alloc = sl.get("allocation")
            if alloc:
                spent = ", ".join(f"{g['group']} {g['prompts']}" for g in alloc["groups"])
                print(f"  slice {name} ({alloc['rule']}): {alloc['why']}\n    {spent}")
    final = {arm: reports[arm]["rounds"][-1]["model"] for arm in reports}
    aimed, cats = last_exact(workspaces["aimed"], final["aimed"])
    uniform, _ = last_exact(workspaces["uniform"], final["uniform"])
    mean, lo, hi, n = paired_exact(aimed, uniform)
    print(f"\nlast round, aimed - uniform, exact answers paired by test prompt ({n} prompts): {mean:+.3f} "
          f"[{lo:+.3f}, {hi:+.3f}] ({verdict(lo, hi)})")
    print(f"each round, aimed - uniform: {paired_rounds(reports, workspaces, 'aimed')}")
    if REPEAT in reports:
        print(f"the training's own noise, repeat (the trainers' seeds + 1) - uniform, each round: "
              f"{paired_rounds(reports, workspaces, REPEAT)}")
    table = exact_count({"aimed": aimed, "uniform": uniform}, cats, "aimed", "uniform")
    if table is not None:
        print(f"per category, aimed against uniform: exact, gained, lost (all: {table.n} vs "
              f"{sum(uniform.values())}, +{table.gained} -{table.lost})")
        for cat, row in table.per_category.items():
            mine = sum(ok for pid, ok in uniform.items() if (cats.get(pid) or "other") == cat)
            print(f"  {cat:18} {row.n:>4} vs {mine:<4} +{row.gained} -{row.lost}")
    gaps = {arm: (reports[arm]["rounds"][-1].get("delta_best_ref") or {}).get("rating") for arm in ARMS}
    if None not in gaps.values():
        print(f"gap to the best reference, last round: uniform {gaps['uniform']:+.1f}, aimed {gaps['aimed']:+.1f}")
    print(f"minutes: aimed {minutes['aimed']:.1f} against uniform {minutes['uniform']:.1f} "
          f"({minutes['aimed'] / max(minutes['uniform'], 1e-9):.2f}x)")


def main(argv: list[str] | None = None) -> int:
    args, _, sets = parse(argv)
    root = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="bench-aim-"))
    reports: dict[str, dict[str, Any]] = {}
    workspaces: dict[str, Path] = {}
    minutes: dict[str, float] = {}
    for arm in sets:
        ws = workspaces[arm] = root / f"draw-{args.draw}" / arm
        reports[arm], minutes[arm] = run_flywheel(args.config, ws, sets[arm], arm)
        print(f"[bench] {arm}: {minutes[arm]:.1f} min, workspace {ws}", flush=True)
    report(reports, workspaces, minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
