"""A model named by its Ollama tag: the GGUF blob in the local Ollama store, found without Ollama running.

The store (``OLLAMA_MODELS``, default ``~/.ollama/models``) keeps one manifest per tag,
``manifests/HOST/NAMESPACE/MODEL/TAG``, a JSON list of layers; the layer of media type
``application/vnd.ollama.image.model`` is the GGUF, stored as ``blobs/sha256-HEX`` where HEX is its SHA-256,
which is checked before the file is used. Hand-written because no library reads the store offline: Ollama's own
client asks a running server, and its registry clients download.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import EngineError
from .identity import file_digest
from .name_forms import OllamaName

__all__ = ["model_blob", "store_dir"]

MODEL_LAYER = "application/vnd.ollama.image.model"
ADAPTER_LAYER = "application/vnd.ollama.image.adapter"


def store_dir() -> Path:
    """Return the Ollama store: ``$OLLAMA_MODELS`` or ``~/.ollama/models``."""
    root = os.environ.get("OLLAMA_MODELS")
    return Path(root).expanduser() if root else Path.home() / ".ollama" / "models"


def _tags(root: Path, name: OllamaName) -> list[str]:
    folder = root / "manifests" / name.host / name.namespace / name.model
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def model_blob(name: OllamaName) -> Path:
    """Return the GGUF blob of Ollama model ``name`` in the store, its size and SHA-256 checked against its manifest."""
    root = store_dir()
    manifest = root / "manifests" / name.host / name.namespace / name.model / name.tag
    if not manifest.is_file():
        others = _tags(root, name)
        has = f"; the store has {name.model} as {', '.join(others)}" if others else ""
        raise EngineError(
            f"model {str(name)!r} is not in the Ollama store {root} (no manifest {manifest}){has}: pull it "
            f"(`ollama pull {name}`), or set OLLAMA_MODELS to the store's folder (a Linux service's store is "
            f"/usr/share/ollama/.ollama/models)"
        )
    try:
        layers = json.loads(manifest.read_text())["layers"]
        models = [layer for layer in layers if layer["mediaType"] == MODEL_LAYER]
        adapters = [layer for layer in layers if layer["mediaType"] == ADAPTER_LAYER]
        if len(models) != 1:
            raise ValueError(f"{len(models)} layers of type {MODEL_LAYER}, not one")
        algorithm, _, hex_digest = str(models[0]["digest"]).partition(":")
        size = int(models[0]["size"])
        if algorithm != "sha256" or len(hex_digest) != 64:
            raise ValueError(f"digest {models[0]['digest']!r} is not sha256:HEX")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise EngineError(f"model {str(name)!r}: the Ollama manifest {manifest} cannot be read ({err}): pull it "
                          f"again (`ollama pull {name}`)") from err
    if adapters:
        raise EngineError(f"model {str(name)!r} is a GGUF with an adapter in Ollama ({manifest}); only the model "
                          f"layer would be loaded, which answers otherwise: merge the adapter into a GGUF and give "
                          f"its path")
    blob = root / "blobs" / f"sha256-{hex_digest}"
    if not blob.is_file() or blob.stat().st_size != size:
        got = f"{blob.stat().st_size:,} bytes" if blob.is_file() else "missing"
        raise EngineError(f"model {str(name)!r}: its blob {blob} is {got}, its manifest says {size:,} bytes: pull "
                          f"it again (`ollama pull {name}`)")
    digest = file_digest(blob)
    if digest != hex_digest:
        raise EngineError(f"model {str(name)!r}: its blob {blob} has sha256 {digest}, not the {hex_digest} its name "
                          f"and manifest say: the store is damaged; pull it again (`ollama pull {name}`)")
    return blob
