"""The command line: every Typer command, error reporting and printing. Nothing below imports it."""

from .main import app

__all__ = ["app"]
