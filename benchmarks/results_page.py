"""The docs' results page, generated: ``docs/results.md`` from the results log and the earlier measurements.

Two sources, one page: ``benchmarks/results.jsonl`` (``results.py``: one measured figure a line with its
date, commit, machine and command) gives the current value of every figure and the whole log, latest
first; ``benchmarks/results_earlier.md`` (hand-written) keeps the measurements made before the log
existed, narrative tables with their dates and commands. ``results.record`` writes the page again after
each figure it appends, and a test fails when the committed page differs from what this script writes.

    python benchmarks/results_page.py            # write docs/results.md
    python benchmarks/results_page.py --check    # exit 1 when docs/results.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import LOG, Figure, history

ROOT = Path(__file__).resolve().parents[1]
EARLIER = Path(__file__).resolve().parent / "results_earlier.md"
PAGE = ROOT / "docs" / "results.md"

# Scripts that answered one question once: their figures stay on this page (in the log or the earlier
# measurements, each with the commit that measured it) and the script itself in the repository's history.
# (path, the last commit that has it, what it measured)
LAST = "6679ad1"
RETIRED: list[tuple[str, str, str]] = [
    ("benchmarks/bench_cpu_isa.py", LAST, "SFT steps under each CPU capability (default, ATen AVX2, the AVX2 pin, "
     "AVX2-only MKL): s/step and a hash of the trained weights"),
    ("benchmarks/bench_difficulty_judge.py", LAST, "the hard test set's difficulty judge offline, the bundled "
     "default beside Qwen 1.5B"),
    ("benchmarks/bench_flywheel.py", LAST, "the flywheel quickstart end to end with its figures (now "
     "`arena flywheel` itself and `benchmarks/bench_draws.py`)"),
    ("benchmarks/bench_judge_batched.py", LAST, "LLM-judge games batched against one at a time: the same judge "
     "requests, the same model, in one process"),
    ("benchmarks/bench_judge_harvest.py", LAST, "one flywheel round whose data an offline LLM judge chose, beside "
     "the same round chosen by the verifier (wrong SFT answers, paired exact answers)"),
    ("benchmarks/bench_llama_build.py", LAST, "generation throughput of the portable llama.cpp build against a "
     "native one"),
    ("benchmarks/bench_prefill_rows.py", LAST, "one llama.cpp call of several prompts' chunks against one chunk "
     "(whether more rows buy back prompt-evaluation speed; not built)"),
    ("benchmarks/bench_samples.py", LAST, "seeded samples through the transformers engine, batched against one at "
     "a time"),
    ("benchmarks/bench_save_dtype.py", LAST, "a trained model saved in float32 against the same weights saved in "
     "bfloat16 or float16"),
    ("benchmarks/bench_serve_as.py", LAST, "a flywheel model served through transformers beside the same weights "
     "exported to GGUF in llama.cpp"),
    ("benchmarks/bench_train_steps.py", LAST, "seconds per training step with TRL's LM head over every position "
     "against the answer tokens only"),
    ("benchmarks/bench_vote.py", LAST, "a vote over samples (majority, best of k) against the 8-shot reference's "
     "greedy answers"),
]


def _cell(text: str) -> str:
    """Return ``text`` safe inside a Markdown table cell (pipes escaped, one line)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _note(fig: Figure) -> str:
    """Return the note for a table cell: a recorded table (a ``.table`` figure's note) is shown under Tables."""
    if fig.figure.endswith(".table"):
        return f"the table is under [Tables](#{_anchor(fig)})"
    return _cell(fig.note)


def _anchor(fig: Figure) -> str:
    """Return the heading anchor of a recorded table on this page."""
    return "table-" + "".join(c if c.isalnum() else "-" for c in f"{fig.figure}-{fig.date}").lower()


def table_parts(note: str) -> tuple[str, str]:
    """Return (the table as the program printed it, what follows it after a blank line) of a table's note."""
    table, _, comment = note.strip("\n").partition("\n\n")
    return table, comment.strip()


def _value(fig: Figure) -> str:
    """Return the figure's value with its unit, as few digits as it was recorded with."""
    v = fig.value
    shown = f"{int(v):,}" if v == int(v) and abs(v) >= 1000 else f"{v:g}"
    return f"{shown} {fig.unit}".strip()


def _demote(markdown: str) -> str:
    """Return ``markdown`` with every heading one level lower (outside code fences)."""
    out, fence = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("#"):
            line = "#" + line
        out.append(line)
    return "\n".join(out)


def render(log: Path = LOG, earlier: Path = EARLIER) -> str:
    """Return the results page: current figures, the log latest first, then the earlier measurements."""
    figures = history(log)
    lines = [
        "# Results",
        "",
        "<!-- generated by benchmarks/results_page.py from benchmarks/results.jsonl and",
        "     benchmarks/results_earlier.md: edit those, then run `python benchmarks/results_page.py` -->",
        "",
        "Every measured figure of the project with the date, commit, machine and command behind it, the",
        "latest first. A benchmark appends what it measures to `benchmarks/results.jsonl`",
        "(`benchmarks/results.py`: `record(...)`), which writes this page again; a commit ending in `+` was",
        "measured on a work tree with uncommitted changes. The README shows the current figures and links here.",
        "",
        "The arena's figures hold on any x86-64 CPU with AVX2. A flywheel's tables (exact counts, ratings) are the",
        "machine column's CPU family's: on another family a rerun can part after a round or two, and is compared by",
        "its spread over draws ([why](contributing.md#the-flywheels-tables-are-per-cpu-family)).",
        "",
    ]
    if figures:
        latest: dict[str, Figure] = {f.figure: f for f in figures}
        lines += ["## Current figures", "", "The latest record of each figure.", "",
                  "| figure | value | better | date | commit | machine | command | note |",
                  "|---|---|---|---|---|---|---|---|"]
        for f in sorted(latest.values(), key=lambda f: (f.date, f.figure), reverse=True):
            lines.append(f"| `{f.figure}` | {_cell(_value(f))} | {f.better} | {f.date} | {_cell(f.commit) or '-'} "
                         f"| {_cell(f.machine)} | `{_cell(f.command)}` | {_note(f)} |")
        by_date: dict[str, list[Figure]] = defaultdict(list)
        for f in figures:
            by_date[f.date].append(f)
        lines += ["", "## The log, latest first", ""]
        for date in sorted(by_date, reverse=True):
            lines += [f"### {date}", "", "| figure | value | commit | machine | command | note |",
                      "|---|---|---|---|---|---|"]
            for f in reversed(by_date[date]):  # appended in time order: the last one of a day first
                lines.append(f"| `{f.figure}` | {_cell(_value(f))} | {_cell(f.commit) or '-'} | {_cell(f.machine)} "
                             f"| `{_cell(f.command)}` | {_note(f)} |")
            lines.append("")
        tables = [f for f in reversed(figures) if f.figure.endswith(".table")]
        if tables:
            lines += ["## Tables", "",
                      "Tables as the program printed them (a `.table` figure's note), the latest first; the README "
                      "shows the latest of each (`benchmarks/docs_tables.py`).", ""]
            for f in tables:
                table, comment = table_parts(f.note)
                lines += [f'<a id="{_anchor(f)}"></a>', "", f"### `{f.figure}`, {f.date}", "",
                          f"`{f.command}`, commit {f.commit or '-'}, {f.machine}", "", "```", table, "```", ""]
                if comment:
                    lines += [comment, ""]
    else:
        lines += ["No figure has been recorded in `benchmarks/results.jsonl` yet.", ""]
    lines += ["## Retired benchmarks", "",
              "Scripts that measured one question and were then removed from `benchmarks/`. Their figures stay "
              "above, each with the commit that measured it; `git show COMMIT:PATH` prints the script as it was "
              "last.", "", "| last commit with it | script | what it measured |", "|---|---|---|"]
    lines += [f"| {commit} | `{path}` | {_cell(what)} |" for path, commit, what in RETIRED]
    lines.append("")
    if earlier.is_file():
        lines += ["## Earlier measurements", "",
                  "Measured before the results log existed, each with its date and the command that made it "
                  "(narrative tables moved here from the README; the figures are as they were measured then).",
                  "", _demote(earlier.read_text(encoding="utf-8").strip()), ""]
    return "\n".join(lines).rstrip() + "\n"


def write(page: Path = PAGE, log: Path = LOG, earlier: Path = EARLIER) -> bool:
    """Write the page; return whether it changed."""
    text = render(log, earlier)
    if page.is_file() and page.read_text(encoding="utf-8") == text:
        return False
    page.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/results.md is not what the log gives")
    args = ap.parse_args(argv)
    if args.check:
        stale = not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != render()
        if stale:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python benchmarks/results_page.py", file=sys.stderr)
        return 1 if stale else 0
    print(f"{PAGE.relative_to(ROOT)}: {'written' if write() else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
