"""The results log: every measured figure with its date, commit, machine and command, append-only.

``benchmarks/results.jsonl`` holds one JSON object a line; the latest record of a figure is its
current value (the README and the docs' results page, ``docs/results.md`` written by
``results_page.py``, show that one; ``make bench-check`` compares a new run with it). A benchmark
records what it measured with ``record(...)``; nothing is ever rewritten, so the file is also the history.

    {"figure": "battle_stage.cold_s", "value": 1.42, "unit": "s", "better": "lower",
     "date": "2026-12-04", "commit": "1e8d138", "machine": "2 cores, AMD EPYC ...",
     "command": "python benchmarks/bench_battle_stage.py --repeat 3", "note": "3,123 judge calls"}
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

LOG = Path(__file__).resolve().parent / "results.jsonl"


@dataclass(frozen=True)
class Figure:
    """One measured figure: what, how much, which way is better, and where and how it was measured."""

    figure: str
    value: float
    unit: str
    better: Literal["lower", "higher"]
    date: str
    commit: str
    machine: str
    command: str
    note: str = ""


def machine() -> str:
    """Return a short description of this machine: cores and CPU model (``llama_check.cpu_info``'s)."""
    from arena_learning.engines.llama_check import cpu_info

    return f"{os.cpu_count()} cores, {cpu_info()['model']}"


def commit() -> str:
    """Return the short commit of the checkout, with '+' when the work tree has changes ('' outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+" if dirty else "")


def measured(figure: str, value: float, unit: str, better: Literal["lower", "higher"], command: str,
             note: str = "") -> Figure:
    """Return a figure measured now: today's date, this checkout's commit, this machine (nothing is written)."""
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r} (figure {figure})")
    return Figure(figure=figure, value=float(value), unit=unit, better=better,
                  date=_dt.date.today().isoformat(), commit=commit(), machine=machine(),
                  command=command, note=note)


def append(fig: Figure, log: Path = LOG) -> Figure:
    """Append ``fig`` to the log and return it."""
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(fig), ensure_ascii=False) + "\n")
    if log == LOG:  # the docs' results page is generated from the log: keep it in step
        _results_page().write()
    return fig


def record(figure: str, value: float, unit: str, better: Literal["lower", "higher"], command: str,
           note: str = "", log: Path = LOG) -> Figure:
    """Append one measured figure to the log and return it."""
    return append(measured(figure, value, unit, better, command, note), log)


def _results_page() -> Any:
    """Return the module results_page.py beside this file (benchmarks/ is a folder of scripts, not a package)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import results_page

    return results_page


def history(log: Path = LOG) -> list[Figure]:
    """Return every record of the log, oldest first (an absent log is empty)."""
    if not log.is_file():
        return []
    out = []
    for n, line in enumerate(log.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Figure(**json.loads(line)))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{log}:{n}: not a figure record ({err}); fix or remove the line") from err
    return out


def latest(log: Path = LOG) -> dict[str, Figure]:
    """Return the latest record of each figure."""
    return {fig.figure: fig for fig in history(log)}


# ---- figures measured now: printed for bench_check, recorded on request --------------------------------------

EMITTED = "FIGURE "
"""The prefix of the stdout line on which a benchmark prints a figure it measured (then its JSON)."""

TOLERANCE = 0.20
"""How much worse than its last record a figure may get before bench_check names it (20%)."""


def emit(figure: str, value: float, unit: str, better: Literal["lower", "higher"], command: str, note: str = "",
         *, record_it: bool = False, log: Path = LOG) -> Figure:
    """Print one figure measured now on its own stdout line (``FIGURE {json}``, the record it would be: what
    bench_check reads; the note ends with the load average); with ``record_it`` (a benchmark's ``--record``)
    append it to the log as well."""
    # the load says how far a figure of a shared machine is from a quiet one's
    load = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    fig = measured(figure, value, unit, better, command, f"{note}; {load}" if note else load)
    print(EMITTED + json.dumps(asdict(fig), ensure_ascii=False), flush=True)
    return append(fig, log) if record_it else fig


def parse_emitted(text: str) -> list[Figure]:
    """Return the figures a benchmark printed with ``emit`` in ``text`` (its stdout), in order."""
    return [Figure(**json.loads(line[len(EMITTED):])) for line in text.splitlines() if line.startswith(EMITTED)]


@dataclass(frozen=True)
class Change:
    """A figure measured now beside its last record: how much worse it got (negative: better)."""

    new: Figure
    old: Figure | None  # None: the figure has no record yet

    @property
    def worse(self) -> float | None:
        """Return the relative change in the figure's bad direction (0.25: 25% worse), None without a record."""
        if self.old is None or self.old.value == 0:
            return None
        change = (self.new.value - self.old.value) / abs(self.old.value)
        return change if self.new.better == "lower" else -change

    def regressed(self, tolerance: float = TOLERANCE) -> bool:
        """Return whether the figure got more than ``tolerance`` worse than its last record."""
        worse = self.worse
        return worse is not None and worse > tolerance


def compare(figures: list[Figure], log: Path = LOG) -> list[Change]:
    """Return each figure measured now beside the latest record of the same figure in ``log``."""
    last = latest(log)
    return [Change(new=m, old=last.get(m.figure)) for m in figures]
