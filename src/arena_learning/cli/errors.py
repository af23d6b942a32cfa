"""How every command reports a user's mistake: the message on stderr and exit code 2, no traceback.

Data warnings raised while a command runs (``UserWarning`` and subclasses, e.g. a
rating with no exact optimum) are printed on stderr too, after the command.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer
from rich.console import Console

from ..errors import ArenaError

F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def reporting_errors() -> Iterator[None]:
    """Turn an ArenaError into its message and exit code 2; print data warnings."""
    err = Console(stderr=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            yield
        except ArenaError as e:
            err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        finally:
            for w in caught:
                if issubclass(w.category, UserWarning):
                    err.print(f"[yellow]warning:[/] {w.message}", highlight=False, soft_wrap=True)


def user_errors(fn: F) -> F:
    """Decorate a command so that it reports errors as ``reporting_errors`` does."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with reporting_errors():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
