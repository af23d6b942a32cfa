"""The consoles the commands print with: results on stdout, progress and warnings on stderr.

Every command builds its consoles here, and the one progress display (rich bars on stderr,
``progress_bars``) that the stages draw on through ``arena_learning.progress``.

When the stream is a file or a pipe (CI logs, ``> out.txt``) Rich would assume 80 columns and
squeeze the tables; there it gets ``PIPE_WIDTH`` columns instead. On a terminal it takes the
terminal's width. There is one console per stream, so what is printed on stderr while progress
bars are drawn goes above them.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

from ..progress import Track

PIPE_WIDTH = 120
"""Columns of a table printed to a file or pipe."""


def stdout_console() -> Console:
    """Return a console on stdout (results only, so ``--json`` output can be piped), ``PIPE_WIDTH`` wide off a tty."""
    return _console(False, os.environ.get("COLUMNS"))


def stderr_console() -> Console:
    """Return a console on stderr (progress, call stats, warnings), ``PIPE_WIDTH`` wide off a tty."""
    return _console(True, os.environ.get("COLUMNS"))


@functools.cache
def _console(stderr: bool, columns: str | None) -> Console:
    """Return the one console of a stream: off a tty ``PIPE_WIDTH`` wide, or wider where ``COLUMNS`` asks."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    wide = int(columns) if columns and columns.isdigit() else 0  # COLUMNS may ask for more, never for less
    return Console(stderr=stderr, width=max(PIPE_WIDTH, wide))


@contextmanager
def progress_bars() -> Iterator[Track]:
    """Draw rich progress bars on stderr while the block runs; yield the Track that adds one.

    ``track(description, total)`` adds a bar and returns its ``advance(n)``; on a bar with no
    total, ``advance(0)`` marks it done (its total becomes what it counted, so its clock stops).
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        # stderr, so that stdout carries only results (e.g. --json)
        console=stderr_console(),
        transient=False,
    )
    with progress:

        def track(description: str, total: int | None) -> Callable[[int], None]:
            task = progress.add_task(description, total=total)

            def advance(n: int) -> None:
                progress.advance(task, n)
                if total is None and n == 0:
                    done = progress.tasks[task].completed
                    progress.update(task, total=done, completed=done)

            return advance

        yield track


def print_manifest_line(manifest: dict | None) -> None:
    """Print a board's manifest in one line under its table, on stdout (arena.manifest.manifest_line)."""
    from rich.markup import escape

    from ..arena.manifest import manifest_line

    stdout_console().print(f"[dim]{escape(manifest_line(manifest))}[/]", highlight=False, soft_wrap=True)


def write_csv_manifest(csv: object, manifest: dict | None) -> str:
    """Write ``manifest`` beside the CSV board at ``csv`` as ``NAME.manifest.json`` and return that path.

    A CSV has no place for it that every reader skips, so it goes beside: the same name, another suffix.
    """
    import json
    from pathlib import Path

    path = Path(str(csv)).with_suffix(".manifest.json")
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return str(path)
