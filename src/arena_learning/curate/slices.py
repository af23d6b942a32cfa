"""Slices: the training pool cut into D0..D{n-1}, stratified by cluster, seeded.

D0 seeds the initial SFT; each later slice feeds one round of battles. Stratified
means every slice holds each cluster in (very nearly) the pool's proportion, so
the rounds differ in data, not in topic mix.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ..errors import ArenaError
from ..records import Prompt


def slice_names(n: int) -> list[str]:
    """Return D0, D1, ... D{n-1}."""
    return [f"D{i}" for i in range(n)]


def slice_sizes(total: int, n_slices: int, d0_size: int | None = None) -> list[int]:
    """Return the size of each slice: equal (the first ones one larger), or D0 fixed and the rest equal."""
    if n_slices < 1:
        raise ArenaError("slices.n_slices must be at least 1")
    if d0_size is None:
        base, extra = divmod(total, n_slices)
        return [base + (1 if i < extra else 0) for i in range(n_slices)]
    if d0_size > total:
        raise ArenaError(f"slices.d0_size is {d0_size} but the pool holds only {total} prompts after cleaning")
    rest = slice_sizes(total - d0_size, n_slices - 1)
    return [d0_size, *rest]


def stratified_order(prompts: Sequence[Prompt], seed: int = 0) -> np.ndarray:
    """Return an order of the prompts (int64 (N,)) in which every stretch mixes the clusters in proportion.

    Systematic stratified sampling: within each cluster the members are shuffled and
    the j-th of n gets the key (j + u) / n, with u uniform in [0, 1) drawn once per
    cluster; sorting by key interleaves the clusters evenly, so any contiguous cut
    holds each cluster in proportion (within one item). Prompts without a cluster
    form one stratum of their own.
    """
    rng = np.random.default_rng(seed)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[p.cluster if p.cluster is not None else "\x00none"].append(i)
    keys = np.empty(len(prompts), dtype=np.float64)
    for name in sorted(groups):
        members = np.asarray(groups[name], dtype=np.int64)
        members = members[rng.permutation(len(members))]
        u = rng.random()
        keys[members] = (np.arange(len(members)) + u) / len(members)
    # Equal keys (clusters of equal size) are broken by a seeded random tie key, not by position.
    ties = rng.permutation(len(prompts))
    return np.lexsort((ties, keys))


def cut_slices(
    prompts: Sequence[Prompt], n_slices: int, seed: int = 0, d0_size: int | None = None
) -> list[list[Prompt]]:
    """Return ``n_slices`` lists of prompts (D0 first), stratified by cluster, every prompt in exactly one."""
    sizes = slice_sizes(len(prompts), n_slices, d0_size)
    order = stratified_order(prompts, seed)
    out: list[list[Prompt]] = []
    start = 0
    for name, size in zip(slice_names(n_slices), sizes):
        part = [prompts[int(i)] for i in order[start : start + size]]
        out.append([p.model_copy(update={"meta": {**p.meta, "slice": name}}) for p in part])
        start += size
    return out
