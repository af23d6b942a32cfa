"""The docs' measured tables and the guides' configs, generated: each written once (in the results log, or in
``examples/``) and inserted into the pages.

A page (the README, or any page under ``docs/``) holds a generated block between two HTML comments::

    <!-- generated: flywheel-quickstart (benchmarks/docs_tables.py, from benchmarks/results.jsonl) -->
    ...
    <!-- end generated -->

and this script writes the block's body from the latest records of ``benchmarks/results.jsonl``
(``results.py``). A table the program prints (a leaderboard, a flywheel's round table) is recorded as
one figure named ``<prefix>.table`` whose note is the table as printed; a block shows the latest such
record of the first prefix in its list that has one. A new measurement is therefore one appended
record and one run of this script (``make docs`` runs it); a test fails when a page differs from
what this script writes. A block named ``config-NAME`` holds ``examples/NAME.yaml`` as a YAML code block.

A table is recorded as the program printed it, then what to say about it after a blank line (shown on the
results page only), e.g. the flywheel quickstart's round table and the figures of the requirements table::

    results.record("flywheel_quickstart.table", 82, "of 288", "higher", "arena flywheel examples/flywheel.yaml",
                   note=round_table + "\n\nwhat the run showed")
    results.record("flywheel_quickstart.minutes", 21.5, "min", "lower", "arena flywheel examples/flywheel.yaml")
    # and .peak_rss_gb, .disk_gb (GB) for each run of REQUIREMENTS below

    python benchmarks/docs_tables.py            # write the blocks of every page
    python benchmarks/docs_tables.py --check    # exit 1 when a page's blocks are out of date
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import LOG, Figure, history
from results_page import table_parts

ROOT = Path(__file__).resolve().parents[1]
RESULTS_LINK = "docs/results.md"

BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+)[^>]*-->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


CONFIG_BLOCK = "config-"
"""A block named ``config-NAME`` holds ``examples/NAME.yaml`` whole, as a YAML code block: a guide's complete
config shows on GitHub too (a snippet include shows there as a bare line), and it cannot drift from the file."""


def opening(name: str) -> str:
    """Return the comment that opens the block ``name``."""
    source = (f"examples/{name.removeprefix(CONFIG_BLOCK)}.yaml" if name.startswith(CONFIG_BLOCK)
              else "benchmarks/results.jsonl")
    return f"<!-- generated: {name} (benchmarks/docs_tables.py, from {source}) -->"


def _config(name: str) -> str:
    """Return the code block of the example config a ``config-NAME`` block shows."""
    path = ROOT / "examples" / f"{name.removeprefix(CONFIG_BLOCK)}.yaml"
    if not path.is_file():
        raise ValueError(f"generated block {name!r}: no example config {path.relative_to(ROOT)}")
    body = path.read_text(encoding="utf-8")
    return f"```yaml\n{body}{'' if body.endswith(chr(10)) else chr(10)}```\n"


@dataclass(frozen=True)
class TableSource:
    """A table of a run, taken from the latest ``<prefix>.table`` record of the first prefix that has one.

    ``since`` keeps out a prefix's records older than a date (a config that changed under the same name).
    """

    prefixes: tuple[str, ...]
    since: dict[str, str]
    stand_in: str = ""  # said under a table of a later prefix (one that stands in for the first)

    def pick(self, figures: Sequence[Figure]) -> Figure | None:
        for prefix in self.prefixes:
            found = [f for f in figures if f.figure == f"{prefix}.table" and f.date >= self.since.get(prefix, "")]
            if found:
                return found[-1]
        return None


# The flywheel quickstart became the paper's setting (stronger teachers) on 2026-12-05: its records before
# that day are of the same-weights run, now examples/flywheel-same-weights.yaml. Until the quickstart's own
# table is recorded, its slot shows the teacher ladder's, whose first three rounds are the quickstart's.
ARENA = TableSource(("quickstart",), {})
FLYWHEEL = TableSource(("flywheel_quickstart", "flywheel_ladder"), {"flywheel_quickstart": "2026-12-05"},
                       "the teacher ladder's rounds, whose first three are this quickstart's")

# The requirements table: per run, the records of its time, peak memory and disk.
REQUIREMENTS: tuple[tuple[str, str, str], ...] = (
    # (the row's label, the command a reader types, the figures' prefix)
    ("the install", "make", "install"),
    ("the arena quickstart", "make demo", "make_demo"),
    ("the flywheel quickstart", "arena flywheel examples/flywheel.yaml", "flywheel_quickstart"),
    ("the teacher ladder", "arena flywheel examples/flywheel-ladder.yaml", "flywheel_ladder"),
)
REQUIREMENT_COLUMNS = (("minutes", "time"), ("peak_rss_gb", "peak memory"), ("disk_gb", "disk"))
SINCE = dict(FLYWHEEL.since)


def _table(source: TableSource, figures: Sequence[Figure], link: str) -> str:
    fig = source.pick(figures)
    if fig is None:
        names = " or ".join(f"`{p}.table`" for p in source.prefixes)
        return f"No table recorded yet: append a {names} record to `benchmarks/results.jsonl`.\n"
    cores = fig.machine.split(",", 1)[0]
    own = fig.figure.startswith(source.prefixes[0] + ".")
    stand_in = f" ({source.stand_in})" if source.stand_in and not own else ""
    return (f"```\n{table_parts(fig.note)[0]}\n```\n"
            f"`{fig.command}`{stand_in}, {cores} ([when, where and at which commit]({link}#current-figures)).\n")


def _amount(fig: Figure | None) -> str:
    if fig is None:
        return "-"
    if fig.unit == "min":
        minutes = fig.value
        return f"{minutes:.0f} min" if minutes >= 10 else f"{minutes:.1f} min"
    return f"{fig.value:g} {fig.unit}"


def _requirements(figures: Sequence[Figure], link: str) -> str:
    latest: dict[str, Figure] = {}
    for f in figures:
        prefix = f.figure.split(".", 1)[0]
        if f.date >= SINCE.get(prefix, ""):
            latest[f.figure] = f
    lines = ["| run | command | " + " | ".join(title for _, title in REQUIREMENT_COLUMNS) + " |",
             "|---|---|" + "---|" * len(REQUIREMENT_COLUMNS)]
    for label, command, prefix in REQUIREMENTS:
        cells = [_amount(latest.get(f"{prefix}.{key}")) for key, _ in REQUIREMENT_COLUMNS]
        lines.append(f"| {label} | `{command}` | " + " | ".join(cells) + " |")
    shown = [f for key, f in latest.items() if key.split(".", 1)[0] in {p for _, _, p in REQUIREMENTS}]
    cores = sorted({f.machine.split(",", 1)[0] for f in shown})
    return ("\n".join(lines) + "\n\n"
            f"Measured on {' and '.join(cores) or 'no machine yet'}; - : not recorded yet ([each figure's date, "
            f"machine and command]({link}#current-figures)).\n")


def _install_extras(figures: Sequence[Figure], link: str) -> str:
    """The install page's table of extras: each one's job and what it brings (``arena_learning.extras``, the one
    place that says so) and what it adds to the core on disk (``bench_install.py``'s records)."""
    from arena_learning.extras import EXTRAS

    latest = {f.figure: f for f in figures}
    lines = ["| job | extra | what it brings | size on the core |", "|---|---|---|---|"]
    for name, extra in EXTRAS.items():
        size = latest.get(f"install.extra_{name}_mb")
        cell = f"{size.value:,.0f} MB" if size is not None else "-"
        lines.append(f"| {extra.job} | `{name}` | {', '.join(extra.dists)} | {cell} |")
    core = latest.get("install.core_mb")
    whole = f"The core itself: {core.value:,.0f} MB in a fresh virtual environment. " if core is not None else ""
    return ("\n".join(lines) + "\n\n"
            f"`all` is every extra but `vllm`. {whole}Sizes: [the results page]({link}#current-figures) "
            "(`install.*`).\n")


HOSTED_COSTS = (("small", "a small hosted judge"), ("large", "a large hosted judge"))
PRICED = re.compile(r"judge (?P<model>\S+) at \$(?P<i>[\d.]+) / \$(?P<o>[\d.]+) per million")


def _hosted_costs(figures: Sequence[Figure], link: str) -> str:
    """The cost of a realistic hosted run as ``arena plan`` prices it (the ``hosted_cost.*`` records, each with
    its plan command): an estimate at list prices, synchronous and through a Batch API."""
    latest = {f.figure: f for f in figures if f.figure.startswith("hosted_cost.")}
    lines = ["| judge | list price in / out (per million tokens) | at most, synchronous | at most, Batch API |",
             "|---|---|---|---|"]
    for size, label in HOSTED_COSTS:
        sync, batch = latest.get(f"hosted_cost.{size}_judge.usd"), latest.get(f"hosted_cost.{size}_judge.usd_batch")
        m = PRICED.search(sync.note) if sync else None
        judge = f"{label} (`{m['model']}`)" if m else label
        price = f"${m['i']} / ${m['o']}" if m else "-"
        cells = [f"${f.value:,.2f}" if f else "-" for f in (sync, batch)]
        lines.append(f"| {judge} | {price} | {cells[0]} | {cells[1]} |")
    return ("\n".join(lines) + "\n\n"
            "Estimates of list prices, not bills: `examples/rate-endpoints.yaml` on arena-hard's 500 questions, two "
            "models of yours (your own servers, priced at 0) against the imported baseline, every pair judged in both "
            "orders, the canaries included, outputs counted at `max_tokens` (an upper bound). "
            f"Each figure's `arena plan` command, with the judge's prices set, is on [the results page]"
            f"({link}#current-figures).\n")


BLOCKS: dict[str, Callable[[Sequence[Figure], str], str]] = {
    "hosted-costs": _hosted_costs,
    "install-extras": _install_extras,
    "arena-quickstart": lambda figures, link: _table(ARENA, figures, link),
    "flywheel-quickstart": lambda figures, link: _table(FLYWHEEL, figures, link),
    "requirements": _requirements,
}


def pages() -> list[Path]:
    """Return the pages that may hold generated blocks: the README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _link(page: Path) -> str:
    """Return the results page's path as ``page`` links it."""
    return os.path.relpath(ROOT / RESULTS_LINK, page.parent).replace(os.sep, "/")


def render(text: str, page: Path, log: Path = LOG) -> str:
    """Return ``text`` (the page ``page``) with every generated block written from ``log``."""
    figures = history(log)

    def fill(m: re.Match[str]) -> str:
        name = m["name"]
        if name.startswith(CONFIG_BLOCK):
            return f"{opening(name)}\n{_config(name)}{m[4]}"
        if name not in BLOCKS:
            raise ValueError(f"{page}: unknown generated block {name!r}; known: {', '.join(sorted(BLOCKS))}")
        return f"{opening(name)}\n{BLOCKS[name](figures, _link(page))}{m[4]}"

    return BLOCK.sub(fill, text)


def stale(log: Path = LOG) -> list[Path]:
    """Return the pages whose generated blocks differ from what the log gives."""
    return [p for p in pages() if (t := p.read_text(encoding="utf-8")) != render(t, p, log)]


def write(log: Path = LOG) -> list[Path]:
    """Write every page's generated blocks; return the pages that changed."""
    changed = stale(log)
    for p in changed:
        p.write_text(render(p.read_text(encoding="utf-8"), p, log), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a page's generated blocks are out of date")
    args = ap.parse_args(argv)
    if args.check:
        out = stale()
        for p in out:
            print(f"{p.relative_to(ROOT)} is out of date: run python benchmarks/docs_tables.py", file=sys.stderr)
        return 1 if out else 0
    changed = write()
    print("\n".join(f"{p.relative_to(ROOT)}: written" for p in changed) or "every generated block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
