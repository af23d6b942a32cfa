"""The command line: every Typer command, error reporting and printing. Nothing below imports it.

``app`` is imported on first use, so that ``arena --help`` (``cli.listing``) imports none of the commands."""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from .main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
