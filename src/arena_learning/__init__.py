"""Arena Learning: an offline, machine-judged chatbot arena and the post-training flywheel on its battles."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cpu_isa import pin_cpu_isa

# torch's CPU kernels at AVX2 on every x86-64 machine, before torch computes anything: the same weights trained on a
# machine with AVX-512 as on one without (cpu_isa; ARENA_CPU_ISA=native opts out)
pin_cpu_isa()

if TYPE_CHECKING:
    from pathlib import Path

    from .records import Rating

__version__ = "0.1.0"


def workspace_board(path: str | Path) -> list[Rating]:  # a thin re-export, imported lazily to keep `import` cheap
    """Return the leaderboard (list of Rating) of the run stored in the workspace at ``path``."""
    from .pipeline import workspace_board as _board

    return _board(path)
