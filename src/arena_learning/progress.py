"""Progress as callbacks: the stages say how far they got, the command line draws it.

A stage with long work calls ``track(description, total)`` once per task and gets back an
``advance(n)`` to call as items finish (``total`` None: an open-ended task, which
``advance(0)`` marks done). It never draws anything itself: printing belongs to ``cli/``,
which installs its progress bars with ``show_with`` when it starts. A program that uses the
stages without the command line sees no bars unless it installs a display of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

Advance = Callable[[int], None]
"""Called with the number of items just finished (``0`` on an open-ended task: it is done)."""

Track = Callable[[str, "int | None"], Advance]
"""Progress: (description, total) -> advance(n)."""

Display = Callable[[], AbstractContextManager[Track]]
"""Opens a progress display for the duration of a stage and yields its Track."""

_display: Display | None = None


def _nothing(n: int) -> None:
    return None


def no_track(description: str, total: int | None) -> Advance:
    """The Track that shows nothing."""
    return _nothing


def show_with(display: Display | None) -> None:
    """Install ``display`` as the one every stage with ``show_progress`` draws on (None: draw nothing)."""
    global _display
    _display = display


@contextmanager
def tracking(enabled: bool = True) -> Iterator[Track]:
    """Yield the installed display's Track while the block runs (``no_track`` when not ``enabled`` or none)."""
    if not enabled or _display is None:
        yield no_track
        return
    with _display() as track:
        yield track
