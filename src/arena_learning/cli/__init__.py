"""The command line: every Typer command, error reporting and printing. Nothing below imports it."""

from ..progress import show_with
from .consoles import progress_bars
from .main import app

show_with(progress_bars)  # the stages' progress (arena_learning.progress) is drawn as rich bars on stderr

__all__ = ["app"]
