"""What a voter sees next: an informative real pair, or now and then a control item.

Informative (the default) weighs every (prompt, pair) the voter has not voted on by how unsure the
pair's order is on the current human ratings (a Bradley-Terry fit of the votes so far, with a small
prior so it exists from the first vote, and each strength's variance) times how much a vote on a pair
that close tells, doubles it where the LLM judges disagree (with each other, or one judge with itself
over the two orders), divides it by how often the pair, the prompt and the prompt's category were
voted already (so the votes spread over models and categories), and draws an item in proportion.
``random`` draws a pair uniformly. The order shown is random per item.

Controls come one in every ``1 / control_share`` votes of a voter, at a random place in each block,
so a voter sees a known number of them (7 or 8 in their first 30 votes at the default 25%: enough for the
default rule to flag a random clicker in 30 votes, ``benchmarks/bench_votes.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

import numpy as np

from ..errors import ArenaError
from ..rating.bt import expit, fit_counts
from ..records import Answer, ControlKind, Prompt, Vote

EMPTY = ""
"""The model name stored for a control's empty answer."""


@dataclass(frozen=True)
class ScheduleOptions:
    """How items are chosen.

    Attributes:
        mode: ``informative`` (close pairs, judges' disagreements, even spread) or ``random`` pairs.
        control_share: share of a voter's items that are controls (0 = none); one per block of
            ``round(1 / control_share)`` votes.
        control_kinds: the controls' kinds in turn; a ``repeat`` before the voter has a real vote is an ``empty``.
            Mostly ``empty``: a random clicker fails it 3 times in 4 (``identical`` 1 in 2), so it tells most.
        seed: seed of the draws.
    """

    mode: Literal["informative", "random"] = "informative"
    control_share: float = 0.25
    control_kinds: tuple[ControlKind, ...] = ("empty", "identical", "empty", "empty", "empty", "empty", "empty",
                                              "repeat")
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("informative", "random"):
            raise ArenaError(f"unknown vote schedule {self.mode!r}: use informative or random")
        if not 0 <= self.control_share <= 0.5:
            raise ArenaError(f"control share {self.control_share} is out of range: give a share from 0 to 0.5")
        if not self.control_kinds and self.control_share > 0:
            raise ArenaError("control_kinds is empty: name at least one of identical, empty, repeat")


@dataclass(frozen=True)
class Item:
    """What one vote is asked on: a prompt and two answers in the order shown (left = model_a)."""

    set_name: str
    prompt_id: str
    model_a: str
    model_b: str
    control: ControlKind | None = None


class Pool:
    """Every (prompt, pair of models) of one set that can be shown: both models answered it.

    Arrays of the candidates (C of them): ``prompt`` int (C,) index into ``prompt_ids``, ``i``, ``j``
    int (C,) indices into ``models`` (i < j), ``category`` int (C,) index into ``categories``.
    """

    def __init__(self, set_name: str, prompts: Sequence[Prompt], answers: Sequence[Answer],
                 disagree: Collection[tuple[str, str, str]] = ()):
        self.set_name = set_name
        self.prompts = {p.id: p for p in prompts}
        self.answers: dict[tuple[str, str], Answer] = {
            (a.prompt_id, a.model): a for a in answers
            if a.prompt_id in self.prompts and any(t.strip() for t in a.turns)}
        self.models = sorted({m for _, m in self.answers})
        by_prompt: dict[str, list[int]] = {}
        index = {m: k for k, m in enumerate(self.models)}
        for pid, m in self.answers:
            by_prompt.setdefault(pid, []).append(index[m])
        self.prompt_ids = sorted(by_prompt)
        self.categories = sorted({self.prompts[p].category or "" for p in self.prompt_ids})
        cat_index = {c: k for k, c in enumerate(self.categories)}
        rows = [(n, i, j, cat_index[self.prompts[pid].category or ""])
                for n, pid in enumerate(self.prompt_ids) for i, j in combinations(sorted(by_prompt[pid]), 2)]
        if not rows:
            raise ArenaError(f"set {set_name!r} has no prompt that two models answered: nothing to vote on "
                             "(run the models' answers first: `arena run` or `arena import-answers`)")
        arr = np.asarray(rows, dtype=np.int64)
        self.prompt, self.i, self.j, self.category = arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
        split = set(disagree)
        self.disagree = np.asarray([(self.prompt_ids[n], self.models[i], self.models[j]) in split
                                    for n, i, j in zip(self.prompt, self.i, self.j)], dtype=bool)
        self._row = {(self.prompt_ids[n], self.models[i], self.models[j]): r
                     for r, (n, i, j) in enumerate(zip(self.prompt, self.i, self.j))}

    def __len__(self) -> int:
        return len(self.prompt)

    def row(self, prompt_id: str, a: str, b: str) -> int | None:
        """Return the candidate row of (prompt, pair) in either order, None when it is not one."""
        lo, hi = sorted((a, b))
        return self._row.get((prompt_id, lo, hi))


def next_item(pool: Pool, votes: Sequence[Vote], voter: str, options: ScheduleOptions,
              rng: np.random.Generator, *, session: int | None = None, shown: Collection[str] = ()) -> Item | None:
    """Return what ``voter`` sees next given every vote so far; None when nothing is left.

    Retracted votes count for nothing but what the voter has seen: an undone item does not come back.
    With ``session`` (the voter's session going on; the models of their votes in other sessions were
    shown to them), an item never shows a prompt of ``shown`` (those shown in this session) nor an answer
    whose model the voter knows, and a repeat re-shows only a pair of this session. Without, every vote
    is of one session that has shown nothing.
    """
    everything = [v for v in votes if v.set_name == pool.set_name]
    live = [v for v in everything if not v.retracted]
    mine = [v for v in live if v.voter == voter]
    allowed = _allowed(pool, [v for v in everything if v.voter == voter], session, shown)
    kind = _control_due(len(mine), voter, options)
    if kind is not None:
        item = _control(pool, [v for v in mine if session is None or v.session == session], kind, allowed, rng)
        if item is not None:
            return item
    seen = np.zeros(len(pool), dtype=bool)
    for v in everything:
        r = pool.row(v.prompt_id, v.model_a, v.model_b)
        if r is not None and v.voter == voter:
            seen[r] = True
    free = allowed & ~seen
    if not free.any():
        return None
    weight = _weights(pool, [v for v in live if v.control is None]) if options.mode == "informative" \
        else np.ones(len(pool))
    weight = np.where(free, weight, 0.0)
    r = int(rng.choice(len(pool), p=weight / weight.sum())) if options.mode == "informative" and weight.sum() > 0 \
        else int(rng.choice(np.flatnonzero(free)))
    a, b = pool.models[pool.i[r]], pool.models[pool.j[r]]
    if rng.random() < 0.5:
        a, b = b, a
    return Item(pool.set_name, pool.prompt_ids[pool.prompt[r]], a, b)


def _allowed(pool: Pool, mine: Sequence[Vote], session: int | None, shown: Collection[str]) -> np.ndarray:
    """Return bool (C,): the candidates that keep the voter blind (no prompt of ``shown``, no answer whose model
    the voter saw named: both answers of every real pair they voted on in another session)."""
    allowed = np.ones(len(pool), dtype=bool)
    if session is None:
        return allowed
    known = {(v.prompt_id, m) for v in mine if v.session != session and v.control in (None, "repeat")
             for m in (v.model_a, v.model_b)}
    index = {m: k for k, m in enumerate(pool.models)}
    row_prompt = np.asarray(pool.prompt_ids, dtype=object)[pool.prompt]
    allowed &= ~np.isin(row_prompt, list(shown))
    for pid, model in known:
        if model in index:
            allowed &= ~((row_prompt == pid) & ((pool.i == index[model]) | (pool.j == index[model])))
    return allowed


def _control_due(cast: int, voter: str, options: ScheduleOptions) -> ControlKind | None:
    """Return the control kind due at the voter's vote number ``cast`` (0-based), None for a real item."""
    if options.control_share <= 0:
        return None
    block = max(2, round(1 / options.control_share))
    number, place = divmod(cast, block)
    digest = hashlib.sha256(f"{options.seed}\0{voter}\0{number}".encode()).digest()
    if place != int.from_bytes(digest[:4], "big") % block:
        return None
    return options.control_kinds[number % len(options.control_kinds)]


def _control(pool: Pool, mine: Sequence[Vote], kind: ControlKind, allowed: np.ndarray,
             rng: np.random.Generator) -> Item | None:
    """Return a control item of ``kind`` on an ``allowed`` candidate (a repeat: of one of ``mine``, or another
    kind when there is nothing to repeat); None when no candidate is allowed."""
    if kind == "repeat":
        real = [v for v in mine if v.control is None]
        repeated = {(v.prompt_id, *sorted((v.model_a, v.model_b))) for v in mine if v.control == "repeat"}
        fresh = [v for v in real if (v.prompt_id, *sorted((v.model_a, v.model_b))) not in repeated]
        if fresh:
            v = fresh[int(rng.integers(len(fresh)))]
            return Item(v.set_name, v.prompt_id, v.model_b, v.model_a, "repeat")
        kind = "empty"
    rows = np.flatnonzero(allowed)
    if not len(rows):
        return None
    r = int(rows[int(rng.integers(len(rows)))]) if len(rows) < len(pool) else int(rng.integers(len(pool)))
    pid, model = pool.prompt_ids[pool.prompt[r]], pool.models[pool.i[r]]
    if kind == "identical":
        return Item(pool.set_name, pid, model, model, "identical")
    a, b = (model, EMPTY) if rng.random() < 0.5 else (EMPTY, model)
    return Item(pool.set_name, pid, a, b, "empty")


def vote_counts(votes: Sequence[Vote], index: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Return float (K, K) wins (``[i, j]``: times i beat j) and symmetric ties of ``votes`` between the models of
    ``index`` (model -> row); both bad counts as a tie."""
    k = len(index)
    wins, ties = np.zeros((k, k)), np.zeros((k, k))
    for v in votes:
        a, b = index[v.model_a], index[v.model_b]
        if v.verdict == "a":
            wins[a, b] += 1
        elif v.verdict == "b":
            wins[b, a] += 1
        else:
            ties[a, b] += 1
            ties[b, a] += 1
    return wins, ties


def _weights(pool: Pool, real: Sequence[Vote]) -> np.ndarray:
    """Return float (C,) informativeness of every candidate given the real votes so far."""
    k = len(pool.models)
    index = {m: n for n, m in enumerate(pool.models)}
    rows = [(v, pool.row(v.prompt_id, v.model_a, v.model_b)) for v in real]
    rows = [(v, r) for v, r in rows if r is not None]
    wins, ties = vote_counts([v for v, _ in rows], index)
    pair_n, prompt_n = np.zeros((k, k)), np.zeros(len(pool.prompt_ids))
    cat_n = np.zeros(len(pool.categories))
    for v, r in rows:
        a, b = index[v.model_a], index[v.model_b]
        pair_n[a, b] += 1
        pair_n[b, a] += 1
        prompt_n[pool.prompt[r]] += 1
        cat_n[pool.category[r]] += 1
    theta, _ = fit_counts(wins, ties, prior_games=1.0) if real else (np.zeros(k), None)
    # each strength's variance from its Fisher information (votes weighted by p(1-p)), one prior game included
    p_all = expit(theta[:, None] - theta[None, :])
    var = 1.0 / ((pair_n * p_all * (1 - p_all)).sum(1) + 0.25)
    # how unsure the pair's order is (its z-score on the strengths so far) times what a vote on it tells
    # (p(1-p)): an uncertain model is unsure against every other and is shown again, so an early upset does
    # not lock it away from its neighbours; a pair whose order is settled is left alone
    diff = theta[pool.i] - theta[pool.j]
    z = diff / np.sqrt(var[pool.i] + var[pool.j])
    p = expit(diff)
    close = np.exp(-z * z / 2) * 4 * p * (1 - p)
    spread = 1.0 / (1.0 + pair_n[pool.i, pool.j]) / np.sqrt(1.0 + prompt_n[pool.prompt])
    cat_share = cat_n[pool.category] / max(1.0, cat_n.sum()) * len(pool.categories)
    return close * spread * np.where(pool.disagree, 2.0, 1.0) / (1.0 + cat_share)


def judge_disagreements(outcomes_by_judge: Mapping[str, Mapping[tuple[str, str, str], int]],
                        inconsistent: Collection[tuple[str, str, str]] = ()) -> set[tuple[str, str, str]]:
    """Return the battle keys (prompt, lo, hi) where judges give different outcomes, plus ``inconsistent`` ones."""
    seen: dict[tuple[str, str, str], set[int]] = {}
    for outcomes in outcomes_by_judge.values():
        for key, code in outcomes.items():
            seen.setdefault(key, set()).add(code)
    return {key for key, codes in seen.items() if len(codes) > 1} | set(inconsistent)
