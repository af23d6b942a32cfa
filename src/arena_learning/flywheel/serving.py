"""How the target's models answer: their identity, their GGUF export for llama.cpp (``training.serve_as``), and
the keys of this machine's recorded rates of a harvest's yield and an export's time."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..config import ModelSpec
from ..engines.bundled import cache_dir, resolve_model_path
from ..engines.identity import content_identity
from ..engines.transformers_engine import resolve_hf_folder
from ..errors import ArenaError
from .settings import FlywheelConfig


def model_identity(spec: ModelSpec) -> str:
    """Return what makes ``spec``'s answers: its settings and, for a local model, its weights' content."""
    weights = spec.engine_kind.weights_path(spec.model)
    ident = content_identity(weights) if weights is not None else ""
    blob = spec.model_dump_json(exclude={"name"}) + ident
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


SERVED_GGUF = "model.gguf"
"""A trained stage's model exported to GGUF (``training.serve_as: llamacpp``), beside its folder ``model/``."""


def template_gguf(cfg: FlywheelConfig) -> Path | None:
    """Return the GGUF ``cfg``'s target starts from (a registry name or a .gguf path), whose metadata and tokenizer
    every export of its lineage copies; None (the bundled model) for a target given as a folder."""
    model = cfg.target.model
    if Path(model).expanduser().is_dir():  # a Hugging Face folder: no GGUF of its own
        return None
    try:
        return resolve_model_path(model)
    except ArenaError:
        return None


def base_export_path(cfg: FlywheelConfig, folder: Path) -> Path:
    """Return where the untrained target (the Hugging Face ``folder``) is exported to GGUF for serving: the cache,
    by the folder's content, so every workspace shares it."""
    digest = content_identity(folder).split(":")[1][:16]
    return cache_dir() / "gguf-export" / f"{folder.name}-{digest}-{cfg.training.serve_quantize}.gguf"


def yield_key(cfg: FlywheelConfig, kind: str, selection: str, size: int | None = None) -> str:
    """Return the key of a harvest's yield (``engines.speed``: the share of slice prompts that become data): what
    decides it besides the models' answers: the target, the references, the judge, the harvest settings."""
    blob = json.dumps({"target": cfg.target.model, "kind": kind, "selection": selection, "size": size,
                       "references": [r.model_dump(mode="json") for r in cfg.references],
                       "judge": cfg.judge.model_dump(mode="json"), "harvest": cfg.harvest.model_dump(mode="json")},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def export_key(cfg: FlywheelConfig) -> str:
    """Return the key of a trained model's GGUF export time: the target it is trained from and the tensor type."""
    return f"{cfg.target.model}|{cfg.training.serve_quantize}"


def served_spec(spec: ModelSpec, gguf: str | Path) -> ModelSpec:
    """Return the llamacpp spec that answers for the transformers ``spec`` from its GGUF export ``gguf``.

    The name, ``mode``, ``prompt_format``, ``params`` (and every other contestant setting) stay the
    target's; ``parallel`` is its ``batch_size`` (llama.cpp decodes that many greedy requests
    together, as transformers batches them). In chat mode without a ``chat_template`` the folder's
    own template (tokenizer_config.json or chat_template.jinja) is carried over, as transformers
    would use it.
    """
    update: dict[str, Any] = {"engine": "llamacpp", "model": str(gguf), "parallel": spec.batch_size}
    if spec.mode == "chat" and spec.chat_template is None and spec.chat_format is None:
        template = folder_chat_template(resolve_hf_folder(spec.model))
        if template is not None:
            update["chat_template"] = template
    return ModelSpec.model_validate({**spec.model_dump(), **update})


def answering_as(served: ModelSpec, spec: ModelSpec) -> ModelSpec:
    """Return ``served`` (a lineage model's llama.cpp spec) answering as ``spec``: its name, params and prompt format
    (a sample's seed and shots, a stage's name)."""
    return served.model_copy(update={"name": spec.name, "params": spec.params, "prompt_format": spec.prompt_format})


def folder_chat_template(folder: Path) -> str | None:
    """Return the chat template a Hugging Face folder's tokenizer carries (None: it has none)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
    except (OSError, ValueError):
        return None
    return template if isinstance(template, str) else None
