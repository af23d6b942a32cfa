"""Arena Learning: an offline, machine-judged chatbot arena and the post-training flywheel on its battles."""

from __future__ import annotations

from typing import TYPE_CHECKING

# Importing the package changes nothing in the process: the AVX2 kernel pin (cpu_isa) is applied by the `arena`
# command, or by calling arena_learning.cpu_isa.pin_cpu_isa() before torch computes anything.

if TYPE_CHECKING:
    from pathlib import Path

    from .records import Rating

__version__ = "0.1.0"


def workspace_board(path: str | Path) -> list[Rating]:  # a thin re-export, imported lazily to keep `import` cheap
    """Return the leaderboard (list of Rating) of the run stored in the workspace at ``path``."""
    from .pipeline import workspace_board as _board

    return _board(path)
