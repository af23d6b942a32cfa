"""A local model's identity is its content: a hash of its weight files, computed once.

The ledger keys every call on the model's identity, so a model retrained into the same folder,
or another file under the same name, is a new model and is never served the old one's answers.
Hashing a 250 MB file takes about half a second; the digest is cached by (path, size, mtime) in
the arena cache, so it is computed once per version of the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from .cache import cache_dir

# Files that hold a model's behaviour in a Hugging Face folder (weights, config, tokenizer,
# chat template, PEFT adapters); logs, checkpoints and trainer state do not change answers.
WEIGHT_SUFFIXES = {".safetensors", ".bin", ".gguf", ".pt", ".model", ".json", ".jinja", ".txt"}
SKIP_NAMES = {"trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth", "README.md"}

_lock = threading.Lock()
_memo: dict[tuple[str, int, int], str] = {}


def _index_file() -> Path:
    return cache_dir() / "identity.json"


def _load_index() -> dict[str, str]:
    try:
        return json.loads(_index_file().read_text())
    except (OSError, ValueError):
        return {}


def _save_index(index: dict[str, str]) -> None:
    try:
        _index_file().parent.mkdir(parents=True, exist_ok=True)
        tmp = _index_file().with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(index))
        os.replace(tmp, _index_file())
    except OSError:
        pass  # a read-only cache only costs a re-hash next time


def _file_key(p: Path) -> tuple[str, int, int]:
    st = p.stat()
    return (str(p), st.st_size, st.st_mtime_ns)


def remember_digest(path: str | Path, digest: str) -> None:
    """Record ``digest`` as the sha256 of ``path`` as it is now (a caller that just hashed the bytes it wrote)."""
    key = _file_key(Path(path).resolve())
    with _lock:
        _memo[key] = digest
        index = _load_index()
        index[f"{key[0]}|{key[1]}|{key[2]}"] = digest
        _save_index(index)


def file_digest(path: str | Path) -> str:
    """Return the sha256 of ``path``'s bytes, cached by (absolute path, size, mtime)."""
    p = Path(path).resolve()
    key = _file_key(p)
    with _lock:
        if key in _memo:
            return _memo[key]
        text_key = f"{key[0]}|{key[1]}|{key[2]}"
        index = _load_index()
        digest = index.get(text_key)
        if digest is None:
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
            digest = h.hexdigest()
            index[text_key] = digest
            _save_index(index)
        _memo[key] = digest
        return digest


def model_files(path: str | Path) -> list[Path]:
    """Return the files that make up the model at ``path`` (the file itself, or a folder's weight files)."""
    p = Path(path)
    if p.is_file():
        return [p]
    return sorted(
        f for f in p.rglob("*")
        if f.is_file() and f.suffix in WEIGHT_SUFFIXES and f.name not in SKIP_NAMES
        and not any(part.startswith("checkpoint-") or part.startswith(".") for part in f.relative_to(p).parts)
    )


def content_identity(path: str | Path) -> str:
    """Return ``sha256:<hex>`` of a model file, or of a folder's weight files (names and digests)."""
    p = Path(path)
    files = model_files(p)
    if p.is_file():
        return "sha256:" + file_digest(p)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(p).as_posix()}\0{file_digest(f)}\n".encode())
    return "sha256:" + h.hexdigest()
