"""Benchmark: one flywheel round whose data an offline LLM judge chose, beside the same round chosen by the truth.

Run: ``python benchmarks/bench_judge_harvest.py [CONFIG] [-w ROOT] [--set key=value ...] [--quick] [--json PATH]``

The paper's setting is an LLM judge choosing the training data; on the task suite the truth is known, so what
that choice costs can be measured. CONFIG (default ``examples/flywheel-llm-judge.yaml``: Qwen2.5-Coder 1.5B with
the own-reference judge harvests one round on one slice; the verifier rates the test set) runs twice, each
``arena flywheel`` in a process of its own:

- **judge**: as written (``--accept-judge-risk``: a correctness judge fails the preference canaries, see
  docs/judges.md);
- **truth**: the same with ``judge: {kind: verifier}`` (the harvest's winners are the checker's).

Printed: each run's exact answers on the test set, base -> round 0, and round 0's paired delta to the base (the
flywheel's own: both rated on each bootstrap resample of the test prompts); the harvested SFT answers, how many
are right by the checker, per teacher and per category; the judge's round against the truth's, paired on the same
test prompts (the difference in exact answers with a bootstrap CI over prompts, and the prompts gained and lost per
category); minutes. ``--json PATH`` writes it all. Figures are printed, not asserted: not a timed test.
``--quick`` shrinks everything (24 test prompts, a slice of 12, one training step) to check the script end to end.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arena_learning.flywheel.export import read_items
from arena_learning.flywheel.harvest import SFTItem
from arena_learning.flywheel.slices import slice_set
from arena_learning.rating.paired import exact_answers
from arena_learning.records import Prompt
from arena_learning.store import DEFAULT_SET, Store
from arena_learning.tasks import check

ROOT = Path(__file__).resolve().parents[1]
EXACT = 10.0
QUICK = ["tasks.n=24", "ratings.bootstrap=20", "training.sft.max_steps=1", "training.sft.save_steps=1"]
TRUTH = ["judge={kind: verifier}"]


@dataclass
class SFTCheck:
    """The harvested SFT answers of a run, checked against the task suite's references."""

    total: int = 0
    right: int = 0
    by_model: dict[str, list[int]] = field(default_factory=dict)  # model -> [right, total]
    by_category: dict[str, list[int]] = field(default_factory=dict)  # category -> [right, total]
    wrong_examples: list[dict[str, str]] = field(default_factory=list)  # a few, to read

    @property
    def wrong_share(self) -> float | None:
        return None if not self.total else (self.total - self.right) / self.total


def check_sft(items: Sequence[SFTItem], prompts: Sequence[Prompt], keep: int = 8) -> SFTCheck:
    """Return how many of ``items``' answers the checker scores exact on their prompts (by teacher, by category).

    An item whose prompt has no checker reference is an error: this benchmark runs on task-suite slices only.
    """
    by_id = {p.id: p for p in prompts}
    out = SFTCheck()
    for item in items:
        p = by_id.get(item.prompt_id)
        if p is None or p.checker is None or not p.reference:
            raise SystemExit(f"harvested item for prompt {item.prompt_id!r}: no task-suite prompt with a checker "
                             "reference in the slice; this benchmark runs on task-suite slices only")
        replies = [m["content"] for m in item.messages if m["role"] == "assistant"]
        ok = check(p, replies) >= EXACT
        out.total += 1
        out.right += ok
        for key, table in ((item.source_model, out.by_model), (p.category or "-", out.by_category)):
            row = table.setdefault(key, [0, 0])
            row[0] += ok
            row[1] += 1
        if not ok and len(out.wrong_examples) < keep:
            out.wrong_examples.append({"prompt": p.turns[-1], "answer": replies[-1] if replies else "",
                                       "reference": p.reference[-1], "teacher": item.source_model})
    return out


@dataclass
class PairedExact:
    """Model A against model B on the same prompts: exact answers, the difference with a bootstrap CI."""

    n: int
    a: int
    b: int
    ci_low: float
    ci_high: float
    gained: dict[str, int]  # category -> prompts A answers exactly and B does not
    lost: dict[str, int]

    @property
    def diff(self) -> int:
        return self.a - self.b


def paired_exact(a: Mapping[str, bool], b: Mapping[str, bool], categories: Mapping[str, str | None], *,
                 resamples: int = 2000, seed: int = 0) -> PairedExact:
    """Compare two models' exact answers on the prompts both answered: the difference in exact answers, its 95%
    CI from resampling the prompts (both models' answers on a prompt drawn together), gains and losses by category.
    """
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError("the two models share no checked prompt: were they rated on the same test set?")
    d = [int(a[i]) - int(b[i]) for i in ids]
    rng = random.Random(seed)
    n = len(ids)
    sums = sorted(sum(d[rng.randrange(n)] for _ in range(n)) for _ in range(resamples))
    gained: Counter[str] = Counter(categories.get(i) or "-" for i in ids if a[i] and not b[i])
    lost: Counter[str] = Counter(categories.get(i) or "-" for i in ids if b[i] and not a[i])
    return PairedExact(n=n, a=sum(map(int, (a[i] for i in ids))), b=sum(map(int, (b[i] for i in ids))),
                       ci_low=sums[int(0.025 * resamples)], ci_high=sums[int(0.975 * resamples) - 1],
                       gained=dict(sorted(gained.items())), lost=dict(sorted(lost.items())))


@dataclass
class Run:
    """One flywheel run of the benchmark: its report's round 0 and its harvest, checked."""

    label: str
    workspace: str
    minutes: float
    model: str
    base_exact: int | None
    exact: int | None
    of: int
    delta: dict[str, Any] | None
    sft: SFTCheck
    shortcuts: list[str]


def run_flywheel(config: str, ws: Path, sets: Sequence[str], accept_risk: bool) -> tuple[dict[str, Any], float]:
    """Run ``arena flywheel CONFIG -w WS --json`` in a process of its own; return its report and minutes."""
    cmd = [sys.executable, "-m", "arena_learning", "flywheel", config, "-w", str(ws), "--json",
           *(["--accept-judge-risk"] if accept_risk else []), *(x for kv in sets for x in ("--set", kv))]
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{ws.name}: arena flywheel exited with {done.returncode} (its log is above; the workspace "
                         f"{ws} resumes)")
    return json.loads(done.stdout), (time.perf_counter() - started) / 60


def measure(label: str, report: dict[str, Any], ws: Path, minutes: float) -> Run:
    """Return round 0's figures from a run's ``--json`` report and its workspace's harvested SFT data."""
    r0 = report["rounds"][0]
    exact = r0.get("exact") or {}
    base = (report.get("base") or {}).get("exact") or {}
    files = sorted(ws.rglob("sft.jsonl"))
    items = [i for f in files for i in read_items(f) if isinstance(i, SFTItem)]
    slices = sorted({i.slice for i in items})
    with Store(ws, readonly=True) as store:
        prompts = [p for s in slices for p in store.get_prompts(slice_set(s))]
    return Run(label=label, workspace=str(ws), minutes=round(minutes, 1), model=r0["model"],
               base_exact=base.get("n"), exact=exact.get("n"), of=exact.get("of", 0), delta=r0.get("delta_prev"),
               sft=check_sft(items, prompts), shortcuts=list(r0.get("shortcuts") or []))


def test_exact(ws: Path, model: str) -> tuple[dict[str, bool], dict[str, str | None]]:
    """Return ``model``'s exact answers on a workspace's test set, and each test prompt's category."""
    with Store(ws, readonly=True) as store:
        prompts = store.get_prompts(DEFAULT_SET)
        answers = [a for a in store.get_answers(set_name=DEFAULT_SET) if a.model == model]
    return exact_answers(prompts, answers).get(model, {}), {p.id: p.category for p in prompts}


def _ci(d: Mapping[str, Any] | None) -> str:
    if not d:
        return "-"
    lo, hi = d.get("ci_low"), d.get("ci_high")
    return f"{d['rating']:+.1f}" + ("" if lo is None or hi is None else f" [{lo:+.1f}, {hi:+.1f}]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "flywheel-llm-judge.yaml"))
    ap.add_argument("-w", "--workspace", default=None, help="root of the two runs' workspaces (default: temporary)")
    ap.add_argument("--set", action="append", default=[], help="override a config field (both runs)")
    ap.add_argument("--quick", action="store_true", help="tiny sets and one training step: a check, not figures")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)
    sets = [*([*QUICK, "pool.D0.n=12"] if args.quick else []), *args.set]
    root = Path(args.workspace) if args.workspace else Path(tempfile.mkdtemp(prefix="bench-judge-harvest-"))
    runs: list[Run] = []
    for label, extra, risk in (("judge", [], True), ("truth", TRUTH, False)):
        ws = root / label
        report, minutes = run_flywheel(args.config, ws, [*sets, *extra], risk)
        runs.append(measure(label, report, ws, minutes))
        print(f"[bench] {label}: {minutes:.1f} min, workspace {ws}", flush=True)
    judge, truth = runs
    a, cats = test_exact(Path(judge.workspace), judge.model)
    b, _ = test_exact(Path(truth.workspace), truth.model)
    versus = paired_exact(a, b, cats)

    print(f"\n{'harvest judged by':18} {'exact base -> round 0':24} {'round 0 vs base, paired [95% CI]':34} "
          f"{'SFT answers':>11} {'wrong':>12}  minutes")
    for r in runs:
        wrong = "-" if r.sft.wrong_share is None else f"{r.sft.total - r.sft.right} ({r.sft.wrong_share:.0%})"
        print(f"{r.label:18} {f'{r.base_exact} -> {r.exact} of {r.of}':24} {_ci(r.delta):34} {r.sft.total:>11} "
              f"{wrong:>12}  {r.minutes:.1f}")
    for r in runs:
        teachers = ", ".join(f"{m} {ok}/{n}" for m, (ok, n) in sorted(r.sft.by_model.items()))
        cat = ", ".join(f"{c} {ok}/{n}" for c, (ok, n) in sorted(r.sft.by_category.items()))
        print(f"\n{r.label}: right SFT answers by teacher: {teachers or '-'}\n  by category: {cat or '-'}")
        if r.shortcuts:
            print(f"  shortcuts of round 0: {'; '.join(r.shortcuts)}")
        for w in r.sft.wrong_examples[:4]:
            print(f"  wrong: {w['prompt']!r} -> {w['answer']!r} (right: {w['reference']!r}, from {w['teacher']})")
    print(f"\nthe judge's round 0 against the truth's, paired on {versus.n} test prompts: exact {versus.a} vs "
          f"{versus.b}, difference {versus.diff:+d} [{versus.ci_low:+.0f}, {versus.ci_high:+.0f}]")
    print(f"  gained: {versus.gained or '-'}\n  lost:   {versus.lost or '-'}")
    if args.json:
        out = {"runs": [{**asdict(r), "sft": {**asdict(r.sft), "wrong_share": r.sft.wrong_share}} for r in runs],
               "judge_vs_truth": {**asdict(versus), "diff": versus.diff}}
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
