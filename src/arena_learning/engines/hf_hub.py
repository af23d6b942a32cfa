"""A model named by its Hugging Face repo id: its file or snapshot through ``huggingface_hub`` and the hub's cache.

The cache is the one every Hugging Face tool shares (``HF_HOME``, ``HF_HUB_CACHE``), a pinned revision
(``org/name@REV/...``) is read as pinned, and ``HF_HUB_OFFLINE=1`` reads the cache alone: all of it is the
library's own behaviour, which this module only calls (``hf_hub_download``, ``snapshot_download``). What it adds:
the one GGUF that ``org/name:QUANT`` means (as ``llama-server -hf`` picks it), each file checked against the
SHA-256 its blob is named by (the hub names a large file's blob by its SHA-256), and errors that say what to do.
``huggingface_hub`` is imported inside the functions: it belongs to the ``local`` and ``train`` extras.
"""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .identity import file_digest, model_files
from .name_forms import HubName, is_split

__all__ = ["gguf_file", "snapshot_folder"]

DEFAULT_QUANT = "Q4_K_M"
"""The GGUF ``org/name`` means when the repo holds several (llama.cpp's default for ``-hf``)."""

FOLDER_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
"""What a transformers folder needs from a repo: config, safetensors weights, tokenizer, chat template."""


def _hub(name: HubName) -> Any:
    try:
        import huggingface_hub
    except ImportError as err:
        from ..extras import lacking

        raise lacking("local", "huggingface_hub",
                      f"model {str(name)!r} (a Hugging Face repo id; or give the model's path)") from err
    return huggingface_hub


def _failed(name: HubName, what: str, err: Exception) -> EngineError:
    """Return the EngineError that says why ``what`` of ``name`` could not be had from the hub, and what to do."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{name.repo} at revision {name.revision or 'main'}"
    if isinstance(err, LocalEntryNotFoundError):
        why = ("offline (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else
               "the hub could not be reached (on a machine without network, HF_HUB_OFFLINE=1 reads the cache at once)")
        fix = (f"download it where the hub can be reached (`hf download {name.repo}"
               f"{' ' + name.file if name.file else ''}{' --revision ' + name.revision if name.revision else ''}`) "
               f"into this cache, or give the model's path")
        return EngineError(f"model {str(name)!r}: {what} of {where} is not in the Hugging Face cache "
                           f"{constants.HF_HUB_CACHE} and {why}: {fix}")
    if isinstance(err, GatedRepoError):
        return EngineError(f"model {str(name)!r}: {name.repo} is gated: accept its licence on huggingface.co and "
                           f"log in (`hf auth login`, or set HF_TOKEN)")
    if isinstance(err, RepositoryNotFoundError):
        return EngineError(f"model {str(name)!r}: no Hugging Face repo {name.repo} (or it is private: log in with "
                           f"`hf auth login`); a local file or folder of that name does not exist either")
    if isinstance(err, RevisionNotFoundError):
        return EngineError(f"model {str(name)!r}: {name.repo} has no revision {name.revision!r}")
    if isinstance(err, EntryNotFoundError):
        return EngineError(f"model {str(name)!r}: {where} has no file {name.file!r}")
    return EngineError(f"model {str(name)!r}: {what} of {where} could not be fetched: {err}")


def _hub_errors() -> tuple[type[Exception], ...]:
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    return (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError)


def _transport_errors() -> tuple[type[Exception], ...]:
    """Return the HTTP client's connection errors (httpx's, or httpx2's in huggingface_hub 2), which are no OSError."""
    errors = []
    for client in ("httpx2", "httpx"):
        try:
            errors.append(import_module(client).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def _check_blob(path: Path, name: HubName) -> None:
    """Raise an EngineError if ``path`` (in a hub snapshot) is a large file whose bytes are not the SHA-256 its blob
    is named by; the digest is cached by ``identity``, which needs it for the ledger anyway."""
    blob = path.resolve()
    if blob.parent.name != "blobs" or not re.fullmatch(r"[0-9a-f]{64}", blob.name):
        return  # a small file: its blob is named by its git hash, not a SHA-256
    digest = file_digest(blob)
    if digest != blob.name:
        raise EngineError(
            f"model {str(name)!r}: {path} is damaged in the Hugging Face cache (sha256 {digest}, its blob says "
            f"{blob.name}): download it again (`hf download {name.repo} {name.file or ''} --force-download`)"
        )


def snapshot_folder(name: HubName, download: bool = True) -> Path:
    """Return the snapshot folder of ``name``'s repo at its revision (config, safetensors weights, tokenizer), each
    large file checked against its blob's SHA-256."""
    hub = _hub(name)
    try:
        folder = Path(hub.snapshot_download(name.repo, revision=name.revision, allow_patterns=FOLDER_FILES,
                                            local_files_only=not download))
    except _hub_errors() as err:
        raise _failed(name, "the model folder", err) from err
    for f in model_files(folder):
        _check_blob(f, name)
    return folder


def _repo_ggufs(name: HubName, download: bool) -> list[str]:
    """Return the GGUF files of ``name``'s repo at its revision: from the hub, or the cached snapshot's files when
    offline (what the cache holds is then all there is to choose from)."""
    hub = _hub(name)
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    unreachable: tuple[type[Exception], ...] = (OSError, HfHubHTTPError, *_transport_errors())
    if download and not constants.HF_HUB_OFFLINE:
        try:
            files = hub.HfApi().list_repo_files(name.repo, revision=name.revision)
            return sorted(f for f in files if f.endswith(".gguf"))
        except (RepositoryNotFoundError, RevisionNotFoundError) as err:
            raise _failed(name, "the file list", err) from err
        except unreachable:
            pass  # the hub cannot be reached: choose among the cached files, as hf_hub_download falls back to them
    try:
        folder = Path(hub.snapshot_download(name.repo, revision=name.revision, local_files_only=True,
                                            allow_patterns=["*.gguf"]))
    except _hub_errors() as err:
        raise _failed(name, "the file list", err) from err
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.gguf"))


def _pick(name: HubName, ggufs: list[str]) -> str:
    """Return the GGUF ``name`` means among ``ggufs``: the one whose name ends in the quant (case-insensitive;
    ``DEFAULT_QUANT`` when none is given and the repo has several), never a vision projector."""
    models = [f for f in ggufs if not Path(f).name.lower().startswith("mmproj")]
    if not name.quant and len(models) == 1:
        return models[0]
    quant = (name.quant or DEFAULT_QUANT).lower()
    chosen = [f for f in models if re.search(rf"[-._]{re.escape(quant)}(-\d{{5}}-of-\d{{5}})?\.gguf$", f.lower())]
    if len(chosen) == 1:
        return chosen[0]
    listed = ", ".join(models[:12]) + (f" and {len(models) - 12} more" if len(models) > 12 else "") or "none"
    what = "several" if chosen else "no"
    raise EngineError(
        f"model {str(name)!r}: {what} GGUF files of {name.repo} match {quant.upper()!r} (its GGUF files: {listed}); "
        f"name the file: model: {name.repo}{'@' + name.revision if name.revision else ''}/FILE"
    )


def gguf_file(name: HubName, download: bool = True) -> tuple[Path, str]:
    """Return the GGUF ``name`` names in the hub's cache (downloaded if missing and allowed) and its path in the
    repo, checked against its blob's SHA-256."""
    file = name.file or _pick(name, _repo_ggufs(name, download))
    if not file.endswith(".gguf"):
        raise EngineError(f"model {str(name)!r}: {file!r} is not a GGUF file (the llamacpp engine reads .gguf; a "
                          f"transformers model is named by its repo id alone)")
    if is_split(file):
        raise EngineError(f"model {str(name)!r}: {file} is one part of a split GGUF: download the parts (`hf "
                          f"download {name.repo} --include '{file.split('-00')[0]}*'`) and merge them with "
                          f"llama.cpp's `llama-gguf-split --merge`, then give the merged file's path")
    hub = _hub(name)
    named = HubName(name.repo, name.revision, file)
    try:
        path = Path(hub.hf_hub_download(name.repo, file, revision=name.revision, local_files_only=not download))
    except _hub_errors() as err:
        raise _failed(named, "the file", err) from err
    _check_blob(path, named)
    return path, file
