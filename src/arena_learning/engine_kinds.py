"""Engine kinds: every engine a ``ModelSpec`` can name, registered once with what the stages ask of it.

The config's validation, ``engines.build_engine``, the planners and the Ray backend read this
table instead of listing engine names or testing ``spec.engine == ...`` (one registry per kind
of plug-in, as lm-evaluation-harness does for tasks). A new engine is one line here and its
class. Classes and resolvers are named as ``module:attribute`` (in ``arena_learning.engines``),
not imported, so that validating a config loads no engine's dependencies (llama.cpp, torch,
vLLM, aiohttp) and this module, below the config, imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .engines.base import Engine


@dataclass(frozen=True)
class EngineKind:
    """One engine kind: the class that runs it and what the stages need to know before building it."""

    name: str
    summary: str
    """What the config's documentation says of it."""
    engine: str
    """``module:Class`` in ``arena_learning.engines``: the Engine that runs a spec of this kind."""
    makes_calls: bool = True
    """False: the answers are in the workspace already (``arena import-answers``); nothing is asked."""
    loads_on_build: bool = False
    """Building the engine loads the model, so the planner builds none just to compute ledger keys."""
    weights: str | None = None
    """``module:function`` giving the local weights a spec's ``model`` names (their content is the
    model's identity in the flywheel); None: no local weights (an endpoint, an import, vLLM's own)."""
    extra: str | None = None
    """The extra of the install that the kind needs (``arena_learning.extras``); None: the core runs it."""
    batch_price: float | None = None
    """A batch call's price as a share of a synchronous one's, where the engine's hosted APIs sell batches
    (``ModelSpec.price_batch``'s default); None: no batch price."""

    def engine_class(self) -> type[Engine]:
        """Return the Engine class of this kind (imports its module, loads no model)."""
        cls: type[Engine] = _resolve(self.engine)
        return cls

    def weights_path(self, model: str) -> Path | None:
        """Return the local weights (file or folder) that ``model`` names, or None for a kind without any."""
        if self.weights is None:
            return None
        path: Path = _resolve(self.weights)(model)
        return path


def _resolve(ref: str) -> Any:  # a class or a function, by the registry's name
    module, attr = ref.split(":")
    return getattr(import_module(f"arena_learning.engines.{module}"), attr)


ENGINE_KINDS: dict[str, EngineKind] = {k.name: k for k in (
    EngineKind("llamacpp", "in-process GGUF", "llamacpp:LlamaCppEngine", extra="local",
               weights="bundled:resolve_model_path"),
    EngineKind("openai", "any OpenAI-compatible endpoint", "openai_compat:OpenAIEngine", batch_price=0.5),
    EngineKind("anthropic", "Anthropic's Messages API; the anthropic extra", "anthropic_engine:AnthropicEngine",
               extra="anthropic", batch_price=0.5),
    EngineKind("imported", "answers loaded with `arena import-answers`, no model to run", "imported:ImportedEngine",
               makes_calls=False),
    EngineKind("transformers", "in-process Hugging Face model folder, batched; what the flywheel trains",
               "transformers_engine:TransformersEngine", extra="train",
               weights="transformers_engine:resolve_hf_folder"),
    EngineKind("vllm", "in-process vLLM offline batches; needs a GPU", "vllm_engine:VLLMEngine",
               extra="vllm", loads_on_build=True),
)}
"""Every engine kind by name, in the order the documentation lists them."""


def engine_kind(name: str) -> EngineKind:
    """Return the engine kind called ``name``; a ConfigError names the known ones."""
    kind = ENGINE_KINDS.get(name)
    if kind is None:
        raise ConfigError(f"unknown engine {name!r} (use one of: {', '.join(ENGINE_KINDS)})")
    return kind
