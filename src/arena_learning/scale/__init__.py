"""Running beyond one process: the Ray backend for model calls (``ray_backend``) and training launchers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..config import ScaleConfig

__all__ = ["scaled"]


@contextmanager
def scaled(scale: ScaleConfig) -> Iterator[None]:
    """Within the block, model calls run where ``scale`` says: here (local) or in Ray engine actors (ray)."""
    if scale.backend == "ray":
        from .ray_backend import ray_backend

        with ray_backend(scale):
            yield
    else:
        yield
