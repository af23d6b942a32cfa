"""Arena Learning: an offline, machine-judged chatbot arena and the post-training flywheel on its battles."""

from __future__ import annotations

__version__ = "0.1.0"


def workspace_board(path):  # noqa: ANN001, ANN201 - thin re-export, imported lazily to keep `import` cheap
    """Return the leaderboard (list of Rating) of the run stored in the workspace at ``path``."""
    from .pipeline import workspace_board as _board

    return _board(path)
