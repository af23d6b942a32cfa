"""Where the arena keeps what it builds once per machine: assembled models, content hashes, exports."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Return the directory for assembled models (``$ARENA_CACHE`` or ``~/.cache/arena-learning``)."""
    root = os.environ.get("ARENA_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "arena-learning"
