"""The forms a local model's ``model:`` takes, parsed (``model_names`` says what each means and finds the file).

Parsing only, with no look-up: the Hugging Face and Ollama readers (``hf_hub``, ``ollama_store``) take the parsed
names from here, and ``model_names`` calls them, so none of the three imports another in a circle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HubName", "OllamaName", "is_split", "parse"]

_PART = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
_HUB = re.compile(rf"(?P<repo>(?:{_PART}/)?{_PART})(?:@(?P<revision>[^/:@]+))?(?::(?P<quant>{_PART})|/(?P<file>.+))?")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$")


@dataclass(frozen=True)
class HubName:
    """A Hugging Face repo id, the revision to read (None: the default branch) and the file or quant asked for."""

    repo: str
    revision: str | None = None
    file: str | None = None  # a path in the repo
    quant: str | None = None  # llama.cpp's ``repo:QUANT``: the one GGUF whose name ends in it

    def __str__(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return self.repo + at + (f"/{self.file}" if self.file else f":{self.quant}" if self.quant else "")


@dataclass(frozen=True)
class OllamaName:
    """An Ollama model: ``host/namespace/model:tag`` (``registry.ollama.ai/library/qwen2.5-coder:1.5b``)."""

    host: str
    namespace: str
    model: str
    tag: str

    def __str__(self) -> str:
        if (self.host, self.namespace) == ("registry.ollama.ai", "library"):
            return f"{self.model}:{self.tag}"
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"


def _ollama(text: str) -> OllamaName | None:
    path, _, tag = text.rpartition(":") if ":" in text.rsplit("/", 1)[-1] else (text, "", "latest")
    parts = path.split("/")
    if not tag or not all(re.fullmatch(_PART, p) for p in parts) or len(parts) > 3:
        return None
    host, namespace = "registry.ollama.ai", "library"
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return OllamaName(host, namespace, parts[-1], tag)


def _hub(text: str, bare: bool) -> HubName | None:
    m = _HUB.fullmatch(text.removeprefix("//"))
    if m is None or (bare and "/" not in m["repo"]) or m["repo"].endswith("/"):
        return None
    return HubName(m["repo"], m["revision"], m["file"], m["quant"])


def parse(model: str) -> Path | HubName | OllamaName:
    """Return what ``model`` names: a HubName, an OllamaName, or a Path (one that exists, or none of the forms)."""
    path = Path(model).expanduser()
    if path.exists() or model.startswith(("/", ".", "~")):
        return path
    source, colon, rest = model.partition(":")
    named: HubName | OllamaName | None = None
    if colon and source == "hf":
        named = _hub(rest, bare=False)
    elif colon and source == "ollama":
        named = _ollama(rest)
    elif "/" not in model:
        named = _ollama(model) if ":" in model else None
    elif model.startswith("library/") or (model.count("/") == 2 and "." in model.split("/")[0]):
        named = _ollama(model)
    elif not model.endswith(".gguf") or model.count("/") > 1:  # 'dir/file.gguf' is a path, never a repo
        named = _hub(model, bare=True)
    return path if named is None else named


def is_split(file: str) -> bool:
    """Whether ``file`` is one part of a GGUF split in several files (``-00001-of-00003.gguf``)."""
    return _SPLIT.search(file) is not None
