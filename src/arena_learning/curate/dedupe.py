"""Exact and near-duplicate removal on the concatenated user turns.

Exact: a hash of the case-folded, whitespace-collapsed text. Near: MinHash signatures
indexed in a datasketch ``MinHashLSH``; a prompt whose estimated Jaccard similarity
with an earlier kept prompt reaches the threshold is dropped. The first occurrence
always wins, so the result depends only on the input order.

Signatures are computed here with numpy for whole batches of texts rather than
through ``MinHash.update_batch`` one text at a time (the same values: datasketch's
``affine32`` scheme, checked by a test); at 100,000 conversations the per-object
path costs minutes, this one seconds.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..records import Prompt

Shingle = Literal["char", "word"]

_WS = re.compile(r"\s+")
_WORD = re.compile(r"\w+")

# Odd 64-bit multiplier of the polynomial hash that combines a window of code points.
_POLY = np.uint64(0x9E3779B97F4A7C15)
# Shingle hashes are grouped so one (shingles x permutations) block stays ~32 MB.
_BLOCK_SHINGLES = 1 << 16


def normalize(text: str) -> str:
    """Return ``text`` case-folded with runs of whitespace made one space: what two copies share."""
    return _WS.sub(" ", text).strip().casefold()


def dedupe_text(prompt: Prompt) -> str:
    """Return the normalized concatenated user turns of ``prompt``."""
    return normalize("\n".join(prompt.turns))


# ---- exact ---------------------------------------------------------------------------


def exact_dedupe(prompts: Sequence[Prompt]) -> tuple[list[Prompt], Counter[str], dict[str, str]]:
    """Return the first prompt of each normalized text, drops (``exact_duplicate``), and dropped id -> kept id."""
    first: dict[bytes, str] = {}
    kept: list[Prompt] = []
    dup_of: dict[str, str] = {}
    for p in prompts:
        key = hashlib.blake2b(dedupe_text(p).encode("utf-8"), digest_size=16).digest()
        if key in first:
            dup_of[p.id] = first[key]
        else:
            first[key] = p.id
            kept.append(p)
    return kept, Counter({"exact_duplicate": len(dup_of)}), dup_of


# ---- shingles and signatures ---------------------------------------------------------


def _fmix64(h: np.ndarray) -> np.ndarray:
    # MurmurHash3's finalizer: spreads the polynomial hash over all bits before truncation.
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _fmix32(h: np.ndarray) -> np.ndarray:
    # datasketch's affine32 pre-mix, bit for bit.
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@lru_cache(maxsize=8)
def _powers(n: int) -> np.ndarray:
    return np.array([pow(int(_POLY), n - 1 - j, 1 << 64) for j in range(n)], dtype=np.uint64)


def window_hashes(units: np.ndarray, n: int) -> np.ndarray:
    """Return uint64 hashes of every window of ``n`` units (code points or word hashes); shape (max(L-n+1, 1),)."""
    units = units.astype(np.uint64)
    if len(units) < n:
        # A text shorter than one shingle is one shingle: itself.
        units = np.concatenate([units, np.zeros(n - len(units), dtype=np.uint64)])
    windows = sliding_window_view(units, n)
    with np.errstate(over="ignore"):
        return _fmix64((windows * _powers(n)).sum(axis=1, dtype=np.uint64) + np.uint64(n))


def words(text: str) -> list[str]:
    """Return the words of ``text`` (the units of word shingles and n-grams)."""
    return _WORD.findall(text)


def word_units(text: str) -> np.ndarray:
    """Return the crc32 of each word of ``text``; uint64 (W,)."""
    return np.fromiter((zlib.crc32(w.encode("utf-8")) for w in words(text)), dtype=np.uint64)


def shingle_hashes(text: str, shingle: Shingle = "char", ngram: int = 5) -> np.ndarray:
    """Return the distinct 32-bit hashes of the shingles of normalized ``text``; uint32 (S,), S >= 1."""
    if shingle == "char":
        units = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    else:
        units = word_units(text)
    h = window_hashes(units, ngram).astype(np.uint32)
    return np.unique(h)


@lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Return datasketch's affine32 permutation parameters (a, b) for (num_perm, seed); uint32 (P,) each."""
    from datasketch import MinHash

    a, b = MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
    return np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32)


def signatures(
    texts: Sequence[str],
    num_perm: int = 128,
    seed: int = 1,
    shingle: Shingle = "char",
    ngram: int = 5,
    advance: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Return MinHash signatures of normalized ``texts``; uint32 (N, num_perm), datasketch affine32 values."""
    a, b = permutations(num_perm, seed)
    out = np.empty((len(texts), num_perm), dtype=np.uint32)
    block: list[np.ndarray] = []
    block_rows: list[int] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if not block:
            return
        h = _fmix32(np.concatenate(block))
        starts = np.cumsum([0] + [len(x) for x in block[:-1]])
        with np.errstate(over="ignore"):
            phv = h[:, None] * a[None, :] + b[None, :]
        out[block_rows] = np.minimum.reduceat(phv, starts, axis=0)
        if advance is not None:
            advance(len(block))
        block.clear()
        block_rows.clear()
        size = 0

    for i, text in enumerate(texts):
        hs = shingle_hashes(text, shingle, ngram)
        block.append(hs)
        block_rows.append(i)
        size += len(hs)
        if size >= _BLOCK_SHINGLES:
            flush()
    flush()
    return out


def lean_minhash(signature: np.ndarray, seed: int = 1):  # -> datasketch.LeanMinHash
    """Return a datasketch LeanMinHash holding one signature row (for an LSH index)."""
    from datasketch import LeanMinHash

    return LeanMinHash(seed=seed, hashvalues=signature, scheme="affine32")


def lsh_index(threshold: float, num_perm: int):  # -> datasketch.MinHashLSH
    """Return an empty MinHashLSH tuned a little below ``threshold``.

    Candidates are verified against the threshold afterwards, so a lower banding
    threshold only costs a few more checks and misses fewer true duplicates.
    """
    from datasketch import MinHashLSH

    return MinHashLSH(threshold=max(0.05, threshold - 0.1), num_perm=num_perm)


def similarity(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Return float64 (N,): each of the N signatures ``sig_a`` (N, P) against ``sig_b`` (P,), the estimated
    Jaccard similarity (the share of equal signature entries)."""
    return np.mean(sig_a == sig_b, axis=-1)


# ---- near ----------------------------------------------------------------------------


def near_dedupe(
    prompts: Sequence[Prompt],
    threshold: float = 0.8,
    num_perm: int = 128,
    shingle: Shingle = "char",
    ngram: int = 5,
    seed: int = 1,
    advance: Callable[[int], None] | None = None,
    sigs: np.ndarray | None = None,
) -> tuple[list[Prompt], Counter[str], dict[str, str]]:
    """Return prompts without near duplicates of earlier ones, drops (``near_duplicate``), and dropped id -> kept id.

    ``sigs`` (uint32 (N, num_perm)) may be given when already computed. ``advance`` is
    told of the prompts signed, then of the prompts looked up in the index (2N in all
    when the signatures are computed here), for a progress bar.
    """
    if sigs is None:
        sigs = signatures([dedupe_text(p) for p in prompts], num_perm, seed, shingle, ngram, advance)
    lsh = lsh_index(threshold, num_perm)
    kept: list[Prompt] = []
    dup_of: dict[str, str] = {}
    for i, p in enumerate(prompts):
        if advance is not None and i and i % 1000 == 0:
            advance(1000)
        sig = sigs[i]
        lm = lean_minhash(sig, seed)
        candidates = sorted(lsh.query(lm))
        if candidates:
            sims = similarity(sigs[candidates], sig)
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                dup_of[p.id] = prompts[candidates[best]].id
                continue
        lsh.insert(i, lm, check_duplication=False)
        kept.append(p)
    if advance is not None and prompts:
        advance(len(prompts) - 1000 * ((len(prompts) - 1) // 1000))
    return kept, Counter({"near_duplicate": len(dup_of)}), dup_of
