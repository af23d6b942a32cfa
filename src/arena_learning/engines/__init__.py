"""Engines run models. ``build_engine`` picks one from a ModelSpec, by the registry in ``engine_kinds``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ..config import ModelSpec
from .base import Completion, Engine, Request

__all__ = ["Completion", "Engine", "Request", "build_engine", "engine_class", "placed"]

# Where engines run: None = in this process; else a function that returns an engine running the
# spec elsewhere (the Ray backend's actors). Set for a block of work with ``placed``.
_PLACEMENT: ContextVar[Callable[[ModelSpec], Engine] | None] = ContextVar("engine_placement", default=None)


def engine_class(spec: ModelSpec) -> type[Engine]:
    """Return the class of the engine that runs ``spec`` (imports its module, loads no model)."""
    return spec.engine_kind.engine_class()


def build_engine(spec: ModelSpec) -> Engine:
    """Return the engine that runs ``spec``: here, or where ``placed`` puts engines."""
    place = _PLACEMENT.get()
    if place is not None:
        return place(spec)
    return engine_class(spec)(spec)


@contextmanager
def placed(factory: Callable[[ModelSpec], Engine] | None) -> Iterator[None]:
    """Within the block, ``build_engine`` returns ``factory(spec)`` (None: engines run in this process)."""
    token = _PLACEMENT.set(factory)
    try:
        yield
    finally:
        _PLACEMENT.reset(token)
