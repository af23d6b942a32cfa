"""Engines run models. ``build_engine`` picks one from a ModelSpec."""

from __future__ import annotations

from ..config import ModelSpec
from ..errors import EngineError
from .base import Completion, Engine, Request

__all__ = ["Completion", "Engine", "Request", "build_engine"]


def build_engine(spec: ModelSpec) -> Engine:
    """Return the engine that runs ``spec``."""
    if spec.engine == "llamacpp":
        from .llamacpp import LlamaCppEngine

        return LlamaCppEngine(spec)
    if spec.engine == "openai":
        from .openai_compat import OpenAIEngine

        return OpenAIEngine(spec)
    if spec.engine == "transformers":
        from .transformers_engine import TransformersEngine

        return TransformersEngine(spec)
    raise EngineError(f"model {spec.name!r}: unknown engine {spec.engine!r} (use 'llamacpp', 'openai' or 'transformers')")
