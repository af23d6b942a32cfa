"""Benchmark: the recipe ablation (the paper's Table 4) on the flywheel's world, each stage's paired delta.

Run: ``python benchmarks/bench_recipes.py [CONFIG] [--recipes sft3,sft-dpo-rl,rft-dpo] [-w ROOT] [--set k=v ...]
[--sweep KIND:NAME:key=value[,key=value] ...] [--quick]``

From the same start (CONFIG's target, references, judge, test set and slices; examples/flywheel-world.yaml
by default), each recipe is a flywheel of four rounds, one stage each: round 0 the initial SFT on D0, then
three stages on D1, D2 and D3:

- ``sft3``: SFT, SFT, SFT (the quickstart's recipe);
- ``sft-dpo-rl``: SFT, DPO, RL (RLOO with the verifier's reward): the paper's SFT -> DPO -> PPO;
- ``rft-dpo``: the target's own samples as candidates (``harvest.samples``), SFT (rejection sampling),
  SFT, DPO (pairs among references and samples);
- ``rft3``: own samples, SFT three times.

Each recipe runs in its own fresh workspace under ROOT (a rerun with the same ROOT resumes each one).
Printed per recipe and stage: the paired delta to the model before with its 95% CI (the test prompts resampled once per
bootstrap round, both models rated on it), P(better), exact answers with gained / lost, and minutes.
(`arena leaderboard WS --diff A B` compares any two models of one workspace.) ``--sweep`` adds a variant to
every stage of a kind (``rl:chance:chance_corrected=true``: the RL stage trained again from the same model on
the same prompts with that setting changed), rated in the same table against the same model and printed
under the recipes' rows. The paper's figures
stand beside (WizardArena, arXiv 2407.10627: DPO +135 and PPO +142 Elo over SFT
on its 7B-70B models). Figures are printed, not asserted: it is not a timed test. ``--quick`` shrinks
everything (24 test prompts, slices of 12, one step per stage) to check the script end to end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from arena_learning.config import load_config_file, validate_config
from arena_learning.flywheel.rounds import run_flywheel, save_flywheel_config
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.flywheel_state import Delta, load_state, state_path
from arena_learning.store import Store

ROOT = Path(__file__).resolve().parents[1]

RECIPES: dict[str, dict[str, Any]] = {
    "sft3": {"stages": ["sft", "sft", "sft"], "samples": False},
    "sft-dpo-rl": {"stages": ["sft", "dpo", "rl"], "samples": False},
    "rft-dpo": {"stages": ["sft", "sft", "dpo"], "samples": True},
    "rft3": {"stages": ["sft", "sft", "sft"], "samples": True},
}
QUICK = ["tasks.n=24", "ratings.bootstrap=20", "training.sft.max_steps=1", "training.dpo.max_steps=1",
         "training.rl.max_steps=1", "training.sft.save_steps=1"]


def parse_sweep(text: str) -> tuple[str, str, dict[str, Any]]:
    """Return (stage kind, variant name, changes) of ``--sweep KIND:NAME:key=value[,key=value]``."""
    parts = text.split(":", 2)
    if len(parts) != 3 or parts[0] not in ("sft", "dpo", "rl") or not parts[2]:
        raise SystemExit(f"--sweep {text!r}: write KIND:NAME:key=value[,key=value], KIND one of sft, dpo, rl")
    changes: dict[str, Any] = {}
    for item in parts[2].split(","):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"--sweep {text!r}: {item!r} is not key=value")
        changes[key.strip()] = yaml.safe_load(value)
    return parts[0], parts[1], changes


def recipe_config(base: dict[str, Any], name: str, quick: bool,
                  sweeps: list[tuple[str, str, dict[str, Any]]] | None = None) -> FlywheelConfig:
    """Return ``base`` (a flywheel config's data) with the rounds and samples of recipe ``name``
    (and ``sweeps``' variants on the stages of their kind)."""
    spec = RECIPES[name]
    data = json.loads(json.dumps(base))
    data["name"] = f"{base.get('name', 'flywheel')}-{name}"
    pool = data.get("pool", {})
    missing = [s for s in ("D0", "D1", "D2", "D3") if s not in pool]
    if missing:
        raise SystemExit(f"the config's pool lacks {', '.join(missing)}: the recipes train on D0..D3")
    if quick:
        for s in ("D0", "D1", "D2", "D3"):
            pool[s]["n"] = 12
    data["pool"] = {s: pool[s] for s in ("D0", "D1", "D2", "D3")}
    data["rounds"] = [{"stages": [{"kind": "sft", "slice": "D0"}]}] + [
        {"stages": [{"kind": kind, "slice": f"D{i + 1}"}]} for i, kind in enumerate(spec["stages"])]
    for kind, variant, changes in sweeps or []:
        for rnd in data["rounds"]:
            for stage in rnd["stages"]:
                if stage["kind"] == kind:
                    stage.setdefault("sweep", {})[variant] = changes
    harvest = data.setdefault("harvest", {})
    if spec["samples"]:
        if not harvest.get("samples"):  # the config's own samples if it has them (a dumped config says None)
            harvest["samples"] = {"k": 2, "temperature": 0.7, "seed": 0}
    else:
        harvest.pop("samples", None)
    if "rl" in spec["stages"]:
        data.setdefault("training", {}).setdefault("rl", {})["reward"] = "verifier"
    return validate_config(data, FlywheelConfig, f"recipe {name}")


def _delta(d: Delta | None) -> str:
    if d is None:
        return "-"
    ci = "" if d.ci_low is None or d.ci_high is None else f" [{d.ci_low:+.0f}, {d.ci_high:+.0f}]"
    return f"{d.rating:+.1f}{ci}"


def _exact(e: Any) -> str:
    if e is None:
        return "-"
    return f"{e.n}/{e.of}" + ("" if e.gained is None else f" (+{e.gained} -{e.lost})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "flywheel-world.yaml"))
    ap.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, of {', '.join(RECIPES)}")
    ap.add_argument("-w", "--workspace", default=None, help="root of the recipes' workspaces (default: temporary)")
    ap.add_argument("--set", action="append", default=[], help="override a config field (all recipes)")
    ap.add_argument("--sweep", action="append", default=[], help="KIND:NAME:key=value[,key=value]: a variant of "
                    "every KIND stage with those training settings changed")
    ap.add_argument("--quick", action="store_true", help="tiny sets and one step per stage: a check, not figures")
    args = ap.parse_args(argv)
    names = [n for n in args.recipes.split(",") if n]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        ap.error(f"unknown recipes {unknown}; known: {', '.join(RECIPES)}")
    sweeps = [parse_sweep(x) for x in args.sweep]
    base = load_config_file(args.config, FlywheelConfig, [*(QUICK if args.quick else []), *args.set])
    data = base.model_dump(mode="json", exclude_none=False)
    root = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="bench-recipes-"))
    rows: list[tuple[str, str, str, str, str, str]] = []
    for name in names:
        cfg = recipe_config(data, name, args.quick, sweeps)
        ws = root / name
        started = time.perf_counter()
        with Store(ws) as store:
            save_flywheel_config(cfg, store)
            report = run_flywheel(cfg, store, show_progress=False)
        minutes = (time.perf_counter() - started) / 60
        state = load_state(state_path(ws))
        for r in report.rounds:
            rec = next((s for s in state.stages.values() if s.round == r.round and s.ablation is None), None)
            spent = sum(rec.seconds.spent().values()) / 60 if rec is not None else 0.0
            p = r.delta_prev.p_better if r.delta_prev is not None else None
            rows.append((name, f"{r.round} {'+'.join(r.stages)}", _delta(r.delta_prev),
                         "-" if p is None else f"{p:.2f}", _exact(r.exact), f"{spent:.1f}"))
        for x in report.ablations:
            p = x.delta_prev.p_better if x.delta_prev is not None else None
            minutes_spent = sum(x.seconds.spent().values()) / 60
            rows.append((name, f"{x.round} {x.kind}:{x.ablation}", _delta(x.delta_prev),
                         "-" if p is None else f"{p:.2f}", _exact(x.exact), f"{minutes_spent:.1f}"))
        print(f"[bench] recipe {name}: {minutes:.1f} min, workspace {ws}", flush=True)
    print(f"\n{'recipe':12} {'round':10} {'delta vs before [95% CI]':>26} {'P':>5} {'exact (gained lost)':>20} "
          f"{'min':>5}")
    for row in rows:
        print(f"{row[0]:12} {row[1]:10} {row[2]:>26} {row[3]:>5} {row[4]:>20} {row[5]:>5}")
    print("\nthe paper (WizardArena, arXiv 2407.10627, 7B-70B on GPUs): DPO +135 and PPO +142 Elo over SFT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
