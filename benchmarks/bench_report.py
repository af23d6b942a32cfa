"""Benchmark: the HTML report of a 100,000-battle workspace, built and opened in headless Chromium.

Run: ``python benchmarks/bench_report.py [--prompts P] [--models K] [--runs N] [--inline]``

The workspace is written from records (no model runs): K models (default 10, so 45 pairs) on P
prompts (default 2,223: 100,035 battles), two-turn prompts for one in five, answers of about
600 characters, both orders judged with an explanation of about 200 characters (200,070
judgments), a few failed verdicts and injection flags. It prints:

- the time ``arena report`` takes (read, rate, audit, write), the page's size and the sidecar
  chunks' total size;
- the page's first render in headless Chromium: ``arenaReport.firstRenderMs``, the page's own
  clock from navigation start to the end of the battle browser's first render (the index parsed,
  the filters built, the first 50 rows drawn; every other section is plain HTML above it), the
  median of ``--runs`` fresh pages; then the time to filter on a model and to open a battle (its
  chunk loaded on demand).

Goal: first render under 2 s. Exits 1 when it is missed; 0 with a message when Chromium or
Playwright is missing (the figure needs them). ``--record`` appends the default page's figures
(``arena report``'s time, the first render) to ``benchmarks/results.jsonl`` (``make bench-check``
compares with them); at the default size only, as other sizes are other figures.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from results import emit  # benchmarks/results.py: the results log

from arena_learning import pipeline
from arena_learning.arena.battles import combine_games
from arena_learning.config import RunConfig
from arena_learning.records import Answer, Judgment, Prompt
from arena_learning.report.html import INLINE_LIMIT, write_report
from arena_learning.store import Store

GOAL_S = 2.0
WORDS = ("the model answer judge prompt token rating battle arena value result because therefore however first "
         "second list item code function return example sentence paragraph reasoning step check number data "
         "python table count order position length style bold header answer correct wrong better worse").split()
CATEGORIES = ["math", "code", "writing", "reasoning", "extraction", "roleplay", "stem", "humanities"]


def text(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def build(root: Path, n_prompts: int, n_models: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    models = [f"model-{k:02d}" for k in range(n_models)]
    skill = {m: rng.uniform(0.2, 0.8) for m in models}
    prompts = [Prompt(id=f"q{i:05d}", category=CATEGORIES[i % len(CATEGORIES)],
                      turns=[text(rng, 300)] + ([text(rng, 120)] if i % 5 == 0 else [])) for i in range(n_prompts)]
    answers = [Answer(prompt_id=p.id, model=m, turns=[text(rng, 600) for _ in p.turns], tokens_in=150, tokens_out=160)
               for p in prompts for m in models]
    judgments = []
    for p in prompts:
        for i, a in enumerate(models):
            for b in models[i + 1:]:
                for first, second in ((a, b), (b, a)):
                    if rng.random() < 0.002:
                        judgments.append(Judgment(prompt_id=p.id, model_a=first, model_b=second, judge="judge",
                                                  status="failed", explanation="no verdict", raw=text(rng, 200)))
                        continue
                    sa = round(10 * min(1.0, max(0.0, rng.gauss(skill[first], 0.25))), 1)
                    sb = round(10 * min(1.0, max(0.0, rng.gauss(skill[second], 0.25))), 1)
                    judgments.append(Judgment(
                        prompt_id=p.id, model_a=first, model_b=second, judge="judge", scores_a=[sa], scores_b=[sb],
                        score_a=sa, score_b=sb, verdict="model_a" if sa > sb else "model_b" if sb > sa else "tie",
                        explanation=text(rng, 200),
                        flags=["A: instructions-to-judge: 'ignore the'"] if rng.random() < 0.001 else []))
    battles = combine_games(judgments)
    cfg = RunConfig.model_validate({"name": "bench-report",
                                    "models": [{"name": m, "engine": "imported"} for m in models],
                                    "judge": {"kind": "verifier", "name": "judge"}, "ratings": {"bootstrap": 100}})
    with Store(root) as store:
        pipeline.save_config(cfg, store)
        store.put_prompts(pipeline.TEST_SET, prompts)
        store.put_answers(answers)
        store.replace_judgments(["judge"], judgments)
        store.replace_battles("judge", battles)
    return len(battles)


def _chromium() -> str | None:
    for cand in (os.environ.get("ARENA_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def measure(page_path: Path, runs: int, chromium: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
    first, loaded, filt, opened = [], [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=args)
        for _ in range(runs):
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            page.goto(page_path.as_uri(), wait_until="load", timeout=120_000)
            page.wait_for_selector("html[data-ready='1']", timeout=120_000)
            first.append(page.evaluate("window.arenaReport.firstRenderMs") / 1000)
            loaded.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
            t0 = time.perf_counter()
            page.select_option("#bb-model1", index=3)
            page.wait_for_selector("#bb-rows tr")
            filt.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            page.locator("#bb-rows tr").nth(10).click()
            page.wait_for_selector("#bb-detail pre.answer", timeout=60_000)
            opened.append(time.perf_counter() - t0)
            if errors:
                raise SystemExit(f"page errors: {errors}")
            ctx.close()
        browser.close()
    return {"first": statistics.median(first), "first_max": max(first), "load": statistics.median(loaded),
            "filter": statistics.median(filt), "open": statistics.median(opened)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=2223)
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--inline", action="store_true", help="also measure the page with every text inline (one file)")
    ap.add_argument("--keep", type=Path, help="build the workspace and report here and keep them")
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = ap.parse_args()
    headline = args.prompts == 2223 and args.models == 10  # the README's figures are of this size
    command = f"python benchmarks/bench_report.py --runs {args.runs}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-")) if args.keep is None else args.keep
    try:
        t0 = time.perf_counter()
        n = build(tmp / "ws", args.prompts, args.models)
        print(f"workspace: {n:,} battles, {args.models} models, {args.prompts:,} prompts, written in "
              f"{time.perf_counter() - t0:.1f} s")
        variants = [("sidecar chunks (default)", tmp / "report.html", INLINE_LIMIT)]
        if args.inline:
            variants.append(("one file, every text inline", tmp / "single.html", 10**12))
        chromium = _chromium()
        ok = True
        for label, out, limit in variants:
            t0 = time.perf_counter()
            write_report(tmp / "ws", out, inline_limit=limit)
            build_s = time.perf_counter() - t0
            side = out.parent / (out.stem + "_files")
            side_mb = sum(f.stat().st_size for f in side.glob("*.js")) / 1e6 if side.is_dir() else 0.0
            print(f"[{label}] arena report: {build_s:.1f} s; page {out.stat().st_size / 1e6:.2f} MB"
                  + (f", sidecar chunks {side_mb:.1f} MB in {len(list(side.glob('*.js')))} files" if side_mb else ""))
            default = headline and label.startswith("sidecar")
            if default:
                emit("report.build_s", build_s, "s", "lower", command,
                     f"{n:,} battles: arena report (read, rate, audit, write)", record_it=args.record)
            if chromium is None:
                print("no Chromium (apt-get install -y chromium, or set ARENA_CHROMIUM): no browser figures")
                return 0
            try:
                import playwright  # noqa: F401 - imported only to see whether it is installed
            except ImportError:
                print("no Playwright (pip install -e '.[dev]'): no browser figures")
                return 0
            m = measure(out, args.runs, chromium)
            verdict = "ok" if m["first"] < GOAL_S else "MISSED"
            print(f"[{label}] first render {m['first']:.2f} s (median of {args.runs}, max {m['first_max']:.2f} s; "
                  f"goal < {GOAL_S:.0f} s: {verdict}); load event {m['load']:.2f} s; filter on a model "
                  f"{1000 * m['filter']:.0f} ms; open a battle {1000 * m['open']:.0f} ms")
            if default:
                emit("report.first_render_s", m["first"], "s", "lower", command,
                     f"{n:,} battles: first render in headless Chromium, median of {args.runs}",
                     record_it=args.record)
            if label.startswith("sidecar"):
                ok = ok and m["first"] < GOAL_S
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
