"""The consoles the commands print with: results on stdout, progress and warnings on stderr.

When the stream is a file or a pipe (CI logs, ``> out.txt``) Rich would assume 80 columns and
squeeze the tables; there it gets ``PIPE_WIDTH`` columns instead. On a terminal it takes the
terminal's width.
"""

from __future__ import annotations

import sys

from rich.console import Console

PIPE_WIDTH = 120
"""Columns of a table printed to a file or pipe."""


def stdout_console() -> Console:
    """Return a console on stdout (results only, so ``--json`` output can be piped), ``PIPE_WIDTH`` wide off a tty."""
    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH)


def stderr_console() -> Console:
    """Return a console on stderr (progress, call stats, warnings), ``PIPE_WIDTH`` wide off a tty."""
    return Console(stderr=True, width=None if sys.stderr.isatty() else PIPE_WIDTH)


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
