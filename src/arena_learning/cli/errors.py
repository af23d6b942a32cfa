"""How every command reports a user's mistake: the message on stderr and exit code 2, no traceback.

Messages carry user text (file names, model names, record contents): it is printed as it is,
never read as Rich markup (``[model, prompt]`` stays on screen).

Data warnings raised while a command runs (``UserWarning`` and subclasses, e.g. a
rating with no exact optimum) are printed on stderr too, after the command.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ArenaError
from ..extras import missing_extra
from .consoles import stderr_console

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def reporting_errors() -> Iterator[None]:
    """Turn an ArenaError into its message and exit code 2 (an extra that is not installed too); print data
    warnings."""
    err = stderr_console()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            yield
        except ArenaError as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except ModuleNotFoundError as e:  # an extra's package that no check before the work asked for
            missing = missing_extra(e)
            if missing is None:
                raise
            err.print(f"[bold red]error:[/] {escape(str(missing))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        finally:
            for w in caught:
                if issubclass(w.category, UserWarning):
                    err.print(f"[yellow]warning:[/] {escape(str(w.message))}", highlight=False, soft_wrap=True)


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command so that it reports errors as ``reporting_errors`` does."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with reporting_errors():
            return fn(*args, **kwargs)

    return wrapper


def write_report_or_warn(workspace: Path, console: Console) -> None:
    """Write the HTML report of ``workspace`` and print where it is; if that fails, print a warning instead.

    The report is optional: when it fails, the finished results stay in the workspace and the
    command that made them still succeeds (the user reruns ``arena report``).
    """
    from ..report.html import write_report

    try:
        console.print(escape(f"report: {write_report(workspace)}"))
    except Exception as err:  # any failure: an optional stage is reported, never fatal
        console.print("[yellow]warning:[/] the HTML report failed "
                      + escape(f"({type(err).__name__}: {err}); the results are kept in {workspace}; retry with "
                               f"`arena report {workspace}`"), highlight=False,
                      soft_wrap=True)
