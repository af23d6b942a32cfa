"""Battles reduced to counts: the form every rating fit works on.

A million battles among 20 models hold at most 3 * 190 distinct facts ("i beat j",
"j beat i", "i and j tied" for each unordered pair), so every fit and every bootstrap
round works on those cell counts, never on the battles themselves (FastChat style).

Bootstrap rounds are drawn as counts too:

* ``resample="battle"``: a round is a multinomial draw of N battles over the cells,
  which is exactly resampling battles with replacement.
* ``resample="prompt"``: a round resamples whole prompts with replacement, so the
  games of one prompt (both judge orders, every pair) stay together. Prompts with the
  same cell counts are interchangeable, so they are grouped into *patterns* first and a
  round is a multinomial draw over patterns; when every prompt holds one battle this is
  the battle bootstrap again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArenaError
from ..records import A_WINS, B_WINS, TIE, Battle  # the one set of outcome codes
from ..records import OUTCOME_CODE as OUTCOME_CODES

if TYPE_CHECKING:  # scipy.sparse is imported where it is used: it costs ~0.1 s at start-up
    import scipy.sparse as sp


RESAMPLE_CHOICES = ("prompt", "battle")


@dataclass(frozen=True)
class BattleTable:
    """Battles as arrays.

    Attributes:
        models: the K model names; every other array indexes into it.
        model_a: int32 (N,), index of the model shown first.
        model_b: int32 (N,), index of the model shown second.
        outcome: int8 (N,), ``A_WINS``, ``B_WINS`` or ``TIE``.
        prompt: int64 (N,), prompt group code in 0..P-1; battles sharing a code are
            resampled together by the prompt bootstrap.
    """

    models: tuple[str, ...]
    model_a: np.ndarray
    model_b: np.ndarray
    outcome: np.ndarray
    prompt: np.ndarray

    @property
    def n_battles(self) -> int:
        return int(self.model_a.shape[0])

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_prompts(self) -> int:
        return int(self.prompt.max()) + 1 if self.n_battles else 0

    @classmethod
    def from_battles(cls, battles: Sequence[Battle]) -> BattleTable:
        """Return the table of ``battles`` (models numbered in order of first appearance).

        A battle of weight w (arena-hard's strong verdicts) is w rows, as arena-hard-auto repeats it.
        """
        if len(battles) == 0:
            raise ArenaError("no battles to rate: run the arena first (or check the battle filters)")
        names_a, names_b, outcomes, prompts = [], [], [], []
        for b in battles:
            for _ in range(b.weight):
                names_a.append(b.model_a)
                names_b.append(b.model_b)
                outcomes.append(OUTCOME_CODES[b.outcome])
                prompts.append(b.prompt_id)
        return cls.from_arrays(names_a, names_b, np.asarray(outcomes, dtype=np.int8), prompts)

    @classmethod
    def from_arrays(
        cls,
        model_a: Sequence[str] | np.ndarray,
        model_b: Sequence[str] | np.ndarray,
        outcome: np.ndarray,
        prompt: Sequence[object] | np.ndarray | None = None,
    ) -> BattleTable:
        """Return the table built from per-battle names and outcome codes.

        Args:
            model_a, model_b: (N,) model names.
            outcome: int (N,) codes ``A_WINS``/``B_WINS``/``TIE``.
            prompt: (N,) prompt ids of any hashable type; None gives each battle its own.
        """
        n = len(model_a)
        if n == 0:
            raise ArenaError("no battles to rate: the battle list is empty")
        if len(model_b) != n or len(outcome) != n or (prompt is not None and len(prompt) != n):
            raise ValueError("model_a, model_b, outcome and prompt must have the same length")
        both = np.concatenate([np.asarray(model_a, dtype=object), np.asarray(model_b, dtype=object)])
        codes, uniques = factorize(both)
        if (codes < 0).any():
            raise ArenaError("a battle has no model name (model_a or model_b is empty/missing)")
        a = codes[:n].astype(np.int32)
        b = codes[n:].astype(np.int32)
        same = np.flatnonzero(a == b)
        if same.size:
            i = int(same[0])
            where = f" (prompt {prompt[i]!r})" if prompt is not None else ""
            raise ArenaError(
                f"{same.size} battle(s) pit a model against itself, first: {uniques[a[i]]!r} at battle {i}{where}; "
                "remove self-battles before rating"
            )
        out = np.asarray(outcome, dtype=np.int8)
        if ((out < 0) | (out > 2)).any():
            raise ValueError("outcome codes must be 0 (model_a), 1 (model_b) or 2 (tie)")
        if prompt is None:
            p = np.arange(n, dtype=np.int64)
        else:
            p = factorize(np.asarray(prompt, dtype=object))[0].astype(np.int64)
        return cls(tuple(str(m) for m in uniques), a, b, out, p)


def factorize(values: np.ndarray) -> tuple[np.ndarray, list[object]]:
    """Return (codes, uniques): each value's index among the distinct values in order of first appearance, as
    pandas' ``factorize`` gives them (None and NaN are missing: code -1), without pandas (the core install has none).
    The distinct values by ``dict.fromkeys`` and the codes by ``map``, both looped in C; numpy's ``unique`` sorts,
    which costs more on strings and loses the order of first appearance."""
    index: dict[object, int] = dict.fromkeys(values, -1)  # every value, in order of first appearance
    for missing in [v for v in index if v is None or v != v]:  # None, NaN
        del index[missing]
    for i, v in enumerate(index):
        index[v] = i
    codes = np.fromiter(map(index.get, values, repeat(-1)), dtype=np.intp, count=len(values))
    return codes, list(index)


@dataclass(frozen=True)
class CellCounts:
    """Battles reduced to (unordered pair, outcome) cells with counts.

    For a cell, ``i < j`` are model indices and ``result`` says who won *within the pair*:
    ``A_WINS`` = i won, ``B_WINS`` = j won, ``TIE``. The order the judge saw the two
    answers in is not kept: Bradley-Terry has no position term.

    Attributes:
        n_models: K.
        i, j: int32 (C,), model indices with i < j.
        result: int8 (C,).
        counts: int64 (C,), battles in the cell; sums to N.
        battle_cell: int64 (N,), the cell of each battle (row of the table).
    """

    n_models: int
    i: np.ndarray
    j: np.ndarray
    result: np.ndarray
    counts: np.ndarray
    battle_cell: np.ndarray

    @property
    def n_cells(self) -> int:
        return int(self.counts.shape[0])

    @classmethod
    def from_table(cls, table: BattleTable) -> CellCounts:
        k = table.n_models
        a = table.model_a.astype(np.int64)
        b = table.model_b.astype(np.int64)
        lo = np.minimum(a, b)
        hi = np.maximum(a, b)
        swapped = a > b
        res = table.outcome.astype(np.int64)
        # when model_a has the larger index, "model_a won" means "j won" within the pair
        res = np.where(swapped & (res != TIE), 1 - res, res)
        key = (lo * k + hi) * 3 + res
        # bincount over the K*K*3 key space is O(N), faster than sorting a million keys
        full = np.bincount(key, minlength=3 * k * k)
        present = np.flatnonzero(full)
        lookup = np.full(full.shape[0], -1, dtype=np.int64)
        lookup[present] = np.arange(present.size)
        pair, result = np.divmod(present, 3)
        ci, cj = np.divmod(pair, k)
        return cls(
            n_models=k,
            i=ci.astype(np.int32),
            j=cj.astype(np.int32),
            result=result.astype(np.int8),
            counts=full[present].astype(np.int64),
            battle_cell=lookup[key],
        )

    def matrices(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (wins, ties) float64 (R, K, K) for cell counts float/int (R, C).

        ``wins[r, x, y]`` is how often x beat y in round r; ``ties`` is symmetric.
        """
        counts = np.atleast_2d(counts)
        r, k = counts.shape[0], self.n_models
        wins = np.zeros((r, k * k))
        ties = np.zeros((r, k * k))
        ij = self.i.astype(np.int64) * k + self.j
        ji = self.j.astype(np.int64) * k + self.i
        # each cell maps to one distinct target, so plain fancy assignment is exact
        m = self.result == A_WINS
        wins[:, ij[m]] = counts[:, m]
        m = self.result == B_WINS
        wins[:, ji[m]] = counts[:, m]
        m = self.result == TIE
        ties[:, ij[m]] = counts[:, m]
        ties[:, ji[m]] = counts[:, m]
        return wins.reshape(r, k, k), ties.reshape(r, k, k)


@dataclass(frozen=True)
class PromptPatterns:
    """Prompts grouped by identical cell counts, for the prompt bootstrap.

    Attributes:
        cells: CSR int64 (Q, C), the cell counts of each pattern.
        multiplicity: int64 (Q,), how many prompts have the pattern; sums to P.
    """

    cells: sp.csr_matrix
    multiplicity: np.ndarray

    @property
    def n_prompts(self) -> int:
        return int(self.multiplicity.sum())

    @classmethod
    def from_table(cls, table: BattleTable, cells: CellCounts) -> PromptPatterns:
        import scipy.sparse as sp

        n_prompts = table.n_prompts
        ones = np.ones(table.n_battles, dtype=np.int64)
        x = sp.csr_matrix((ones, (table.prompt, cells.battle_cell)), shape=(n_prompts, cells.n_cells))
        x.sum_duplicates()  # also sorts the column indices of each row
        if x.nnz == x.shape[0] and n_prompts == table.n_battles:
            # one battle per prompt: the patterns are the cells themselves
            return cls(sp.identity(cells.n_cells, dtype=np.int64, format="csr"), cells.counts.copy())
        # Two independent 64-bit hashes of each row (wrapping uint64 arithmetic), then an
        # exact check that every prompt equals its pattern's representative, so a hash
        # collision can never merge different prompts silently.
        rng = np.random.default_rng(0x5EED)
        data = x.data.astype(np.uint64)
        keys = []
        for _ in range(2):
            weights = rng.integers(1, 2**63, size=cells.n_cells, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
            keys.append(np.add.reduceat(data * weights[x.indices], x.indptr[:-1]))
        # group equal (h1, h2) keys: a lexsort is several times faster than unique(axis=0)
        order = np.lexsort((keys[1], keys[0]))
        h1, h2 = keys[0][order], keys[1][order]
        starts = np.flatnonzero(np.concatenate([[True], (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])]))
        first = order[starts]
        multiplicity = np.diff(np.append(starts, n_prompts))
        inverse = np.empty(n_prompts, dtype=np.int64)
        inverse[order] = np.repeat(np.arange(starts.size), multiplicity)
        diff = x - x[first[inverse]]
        diff.eliminate_zeros()
        if diff.nnz:
            return cls(x, np.ones(n_prompts, dtype=np.int64))
        return cls(x[first], multiplicity.astype(np.int64))


def bootstrap_counts(
    cells: CellCounts,
    patterns: PromptPatterns | None,
    rounds: int,
    rng: np.random.Generator,
    *,
    chunk: int,
    threads: int | None = None,
) -> Iterator[np.ndarray]:
    """Yield resampled cell counts, float64 (r, C) per chunk, ``rounds`` rows in all.

    ``patterns`` None resamples battles; otherwise whole prompts. ``threads`` (default:
    the CPU count, at most 4) only matters when many distinct prompt patterns make each
    round cost O(P); every round then has its own seed drawn from ``rng``, so the numbers
    do not depend on the number of threads.
    """
    n = int(cells.counts.sum())
    if patterns is None:
        for start in range(0, rounds, chunk):
            yield _multinomial(rng, n, cells.counts, min(chunk, rounds - start)).astype(np.float64)
        return
    p = patterns.n_prompts
    q = patterns.multiplicity.shape[0]
    cells_t = patterns.cells.T.tocsr()
    # numpy's multinomial costs ~100 ns per category; drawing P prompt indices and
    # counting them costs ~3 ns per prompt. Both are exact; take the cheaper.
    if 3 * p >= 100 * q:
        for start in range(0, rounds, chunk):
            draws = _multinomial(rng, p, patterns.multiplicity, min(chunk, rounds - start))
            # (C, Q) @ (Q, r) keeps the sparse operand on the left, where scipy is fast
            yield np.asarray((cells_t @ draws.T).T, dtype=np.float64)
        return
    from concurrent.futures import ThreadPoolExecutor

    pattern_of_prompt = np.repeat(np.arange(q, dtype=np.intp), patterns.multiplicity)

    def one_round(seed: int) -> np.ndarray:
        # numpy's generator, fancy indexing and scipy's sparse product release the GIL,
        # so rounds run in parallel threads
        picks = pattern_of_prompt[np.random.default_rng(seed).integers(0, p, size=p, dtype=np.int32)]
        return cells_t @ np.bincount(picks, minlength=q)

    workers = threads if threads is not None else min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for start in range(0, rounds, chunk):
            seeds = rng.integers(0, 2**63, size=min(chunk, rounds - start), dtype=np.int64)
            yield np.stack(list(pool.map(one_round, seeds.tolist()))).astype(np.float64)


def _multinomial(rng: np.random.Generator, n: int, counts: np.ndarray, size: int) -> np.ndarray:
    """Return int64 (size, C): multinomial draws of ``n`` with probabilities ``counts / n``.

    numpy rejects probabilities whose first C-1 sum past 1 + 1e-12, which rounding can do
    with tens of thousands of categories; with the largest category last that sum is at
    most 1 - p_max, far from the limit.
    """
    last = int(np.argmax(counts))
    order = np.concatenate([np.delete(np.arange(counts.shape[0]), last), [last]])
    draws = rng.multinomial(n, counts[order] / n, size=size)
    out = np.empty_like(draws)
    out[:, order] = draws
    return out
