"""A leaderboard for one prompt: Bradley-Terry on the battles of its nearest test prompts.

Prompt-to-Leaderboard (P2L, LMArena 2025) ranks the models for one prompt. This is its
nearest-neighbour form: the prompt is embedded, the ``k`` test prompts nearest to it (cosine
similarity of unit-length embeddings) are its neighbours, and the board is the usual
Bradley-Terry fit (``bt.rate``) on their battles, with bootstrap intervals over those prompts.

Everything here is pure: battles, prompts and an embedding matrix in, a ``PromptBoard`` out; the
embedding model and the store are the caller's (``pipeline.stage_prompt_board``).

``held_out_scores`` measures the board as P2L measures itself: fitted without a prompt, how well
does it predict the winners of that prompt's battles (log-loss, accuracy), against the global board
fitted on every other prompt (``benchmarks/bench_prompt_board.py``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ArenaError
from ..records import Battle, Prompt, Rating
from .bt import RateOptions, RatingWarning, leaderboard
from .export import ratings_to_json

SNIPPET = 80
"""Characters of a neighbour's first turn shown beside it."""


@dataclass(frozen=True)
class Neighbour:
    """A test prompt near the query: its id, cosine similarity and the start of its first turn."""

    id: str
    similarity: float
    text: str


@dataclass
class PromptBoard:
    """The board of one prompt: the neighbours whose battles it is fitted on, and the ratings (best first)."""

    k: int
    neighbours: list[Neighbour]
    board: list[Rating]
    battles: int
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"k": self.k, "battles": self.battles, "neighbours": [asdict(n) for n in self.neighbours],
                "models": ratings_to_json(self.board), "warnings": self.warnings}


def rated_prompts(battles: Sequence[Battle], prompts: Sequence[Prompt]) -> list[Prompt]:
    """Return the prompts (in their order) that have at least one battle: the only possible neighbours."""
    played = {b.prompt_id for b in battles}
    return [p for p in prompts if p.id in played]


def check_k(k: int, n: int) -> None:
    """Raise an ``ArenaError`` unless 1 <= ``k`` <= ``n`` (the prompts with battles)."""
    if n == 0:
        raise ArenaError("no test prompt has a battle: run `arena battle` (or `arena run`) first")
    if not 1 <= k <= n:
        raise ArenaError(f"k = {k} is out of range: give 1 to {n} (the test prompts with battles here)")


def nearest(query: np.ndarray, embeddings: np.ndarray, k: int, exclude: int | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Return (indices int64 (k,), similarities float64 (k,)) of the ``k`` rows of ``embeddings`` most similar
    to ``query``, most similar first (ties by row order); row ``exclude`` is never one.

    ``query`` float (D,) and ``embeddings`` float (N, D) are unit-length, so a dot product is the cosine.
    """
    sims = embeddings.astype(np.float64) @ np.asarray(query, dtype=np.float64)
    if exclude is not None:
        sims[exclude] = -np.inf
    order = np.argsort(-sims, kind="stable")[:k]
    return order.astype(np.int64), sims[order]


def prompt_board(battles: Sequence[Battle], prompts: Sequence[Prompt], embeddings: np.ndarray,
                 query: np.ndarray, k: int, options: RateOptions | None = None, *,
                 exclude: str | None = None, **overrides: Any) -> PromptBoard:
    """Return the board of the ``k`` prompts nearest ``query``, fitted on their battles.

    Args:
        battles: the battles (of the test set).
        prompts: the prompts with battles, row i of ``embeddings`` being ``prompts[i]`` (``rated_prompts``).
        embeddings: float (N, D), unit-length rows.
        query: float (D,), the unit-length embedding of the prompt the board is for.
        k: neighbours, 1 to N (N - 1 with ``exclude``).
        options, overrides: the rating options (``bt.RateOptions``); ``resample="prompt"`` by default.
        exclude: a prompt id never taken as a neighbour (the held-out prompt of a measurement).
    """
    if len(prompts) != len(embeddings):
        raise ValueError(f"{len(prompts)} prompts but {len(embeddings)} embeddings")
    ids = [p.id for p in prompts]
    skip = ids.index(exclude) if exclude is not None and exclude in ids else None
    check_k(k, len(prompts) - (skip is not None))
    idx, sims = nearest(query, embeddings, k, skip)
    chosen = {ids[i] for i in idx}
    mine = [b for b in battles if b.prompt_id in chosen]
    o = RateOptions.build(options, **{"resample": "prompt", **overrides})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RatingWarning)
        board = leaderboard(mine, o)
    neighbours = [Neighbour(ids[i], round(float(s), 4), _snippet(prompts[i])) for i, s in zip(idx, sims, strict=True)]
    return PromptBoard(k=k, neighbours=neighbours, board=board, battles=len(mine),
                       warnings=[str(w.message) for w in caught if issubclass(w.category, RatingWarning)])


def _snippet(p: Prompt) -> str:
    text = " ".join(p.turns[0].split())
    return text if len(text) <= SNIPPET else text[: SNIPPET - 3] + "..."


# --------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class Prediction:
    """How well a board predicted held-out battles.

    Attributes:
        log_loss: mean -[y log p + (1 - y) log(1 - p)] over every battle, y = 1 when model_a won,
            0 when model_b won, 1/2 for a tie (a tie is half a win each, as the fit counts it).
        accuracy: share of the decisive battles (no tie) whose winner had p > 1/2 (p = 1/2 counts half).
        decisive_log_loss: the log-loss of the decisive battles alone. With many ties, a board that is merely less
            sure of every winner (fewer battles, more shrinkage) gets a lower ``log_loss``; this one it does not.
        battles: battles predicted; decisive: of them, not a tie.
        unknown: battles with a model the board had not rated (predicted p = 1/2).
        loss_sums, decisive_loss_sums, hit_sums, battle_counts, decisive_counts: float64 (P,) per held-out prompt
            (by prompt id): the sums behind the means above, for a paired bootstrap over prompts (``paired_gain``).
    """

    log_loss: float
    accuracy: float
    decisive_log_loss: float
    battles: int
    decisive: int
    unknown: int
    loss_sums: np.ndarray = field(repr=False, compare=False)
    decisive_loss_sums: np.ndarray = field(repr=False, compare=False)
    hit_sums: np.ndarray = field(repr=False, compare=False)
    battle_counts: np.ndarray = field(repr=False, compare=False)
    decisive_counts: np.ndarray = field(repr=False, compare=False)


def win_probabilities(ratings: dict[str, float], battles: Sequence[Battle], scale: float = 400.0,
                      base: float = 10.0) -> tuple[np.ndarray, int]:
    """Return (float64 (n,): the Bradley-Terry probability that model_a wins each battle, battles with a model
    not in ``ratings``, for which it is 1/2)."""
    p = np.full(len(battles), 0.5)
    unknown = 0
    for i, b in enumerate(battles):
        ra, rb = ratings.get(b.model_a), ratings.get(b.model_b)
        if ra is None or rb is None:
            unknown += 1
            continue
        p[i] = 1.0 / (1.0 + base ** ((rb - ra) / scale))
    return p, unknown


def score_predictions(p: np.ndarray, battles: Sequence[Battle], unknown: int = 0) -> Prediction:
    """Return the log-loss and accuracy of the probabilities ``p`` (model_a wins) against the battles' outcomes."""
    if len(battles) == 0:
        raise ValueError("no battles to score")
    y = np.array([{"model_a": 1.0, "model_b": 0.0}.get(b.outcome, 0.5) for b in battles])
    q = np.clip(p, 1e-12, 1 - 1e-12)
    loss = -(y * np.log(q) + (1 - y) * np.log(1 - q))
    decisive = y != 0.5
    hit = np.where(p == 0.5, 0.5, ((p > 0.5) == (y == 1.0)).astype(np.float64)) * decisive
    _, group = np.unique([b.prompt_id for b in battles], return_inverse=True)
    sums = [np.bincount(group, weights=w).astype(np.float64)
            for w in (loss, loss * decisive, hit, np.ones(len(y)), decisive)]
    acc = float(hit.sum() / decisive.sum()) if decisive.any() else math.nan
    dloss = float(loss[decisive].mean()) if decisive.any() else math.nan
    return Prediction(float(loss.mean()), acc, dloss, len(battles), int(decisive.sum()), unknown, *sums)


@dataclass(frozen=True)
class PairedGain:
    """A board's log-loss and accuracy minus another's on the same held-out battles, with 95% CIs from a bootstrap
    over the held-out prompts (both boards' sums resampled together)."""

    log_loss: float
    log_loss_low: float
    log_loss_high: float
    decisive_log_loss: float
    decisive_log_loss_low: float
    decisive_log_loss_high: float
    accuracy: float
    accuracy_low: float
    accuracy_high: float


def paired_gain(a: Prediction, b: Prediction, rounds: int = 1000, seed: int = 0) -> PairedGain:
    """Return ``a`` minus ``b`` (predictions of the same battles), log-loss and accuracy, with bootstrap CIs."""
    if a.battles != b.battles or len(a.loss_sums) != len(b.loss_sums):
        raise ValueError("the two predictions are not of the same battles")
    rng = np.random.default_rng(seed)
    n = len(a.loss_sums)
    w = np.vstack([np.ones(n), rng.multinomial(n, np.full(n, 1.0 / n), size=rounds)]).astype(np.float64)
    dl = w @ (a.loss_sums - b.loss_sums) / (w @ a.battle_counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        dd = w @ (a.decisive_loss_sums - b.decisive_loss_sums) / (w @ a.decisive_counts)
        da = w @ (a.hit_sums - b.hit_sums) / (w @ a.decisive_counts)
    out: list[float] = []
    for d in (dl, dd, da):
        lo, hi = np.nanquantile(d[1:], [0.025, 0.975])
        out += [float(d[0]), float(lo), float(hi)]
    return PairedGain(*out)


def held_out_scores(battles: Sequence[Battle], prompts: Sequence[Prompt], embeddings: np.ndarray,
                    ks: Sequence[int], held_out: Sequence[int], options: RateOptions | None = None
                    ) -> dict[str, Prediction]:
    """Return, per board, how well it predicts the battles of the prompts ``held_out`` (row indices), each left
    out of every fit in turn: ``"global"`` (every other prompt) and ``"k=K"`` for each of ``ks`` (the K nearest
    other prompts). Point ratings only (no bootstrap): the prediction needs none.
    """
    o = RateOptions.build(options, bootstrap=0)
    by_prompt: dict[str, list[Battle]] = {}
    for b in battles:
        by_prompt.setdefault(b.prompt_id, []).append(b)
    names = ["global", *(f"k={k}" for k in ks)]
    probs: dict[str, list[np.ndarray]] = {n: [] for n in names}
    unknown = dict.fromkeys(names, 0)
    tested: list[Battle] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RatingWarning)  # small neighbourhoods often lack an MLE: the prior is the fit
        for i in held_out:
            pid = prompts[i].id
            mine = by_prompt.get(pid, [])
            if not mine:
                continue
            tested += mine
            rest = [b for b in battles if b.prompt_id != pid]
            boards = {"global": leaderboard(rest, o)}
            for k in ks:
                boards[f"k={k}"] = prompt_board(battles, prompts, embeddings, embeddings[i], k, o, exclude=pid).board
            for name, board in boards.items():
                p, u = win_probabilities({r.model: r.rating for r in board}, mine, o.scale, o.base)
                probs[name].append(p)
                unknown[name] += u
    if not tested:
        raise ArenaError("none of the held-out prompts has a battle: nothing to predict")
    return {n: score_predictions(np.concatenate(probs[n]), tested, unknown[n]) for n in names}
