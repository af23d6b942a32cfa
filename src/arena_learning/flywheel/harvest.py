"""Harvest: battles become training data. Pure functions from records to records.

Three sets, after WizardArena (Arena Learning, NeurIPS 2024, section 3.2):

- **SFT (pair-judge selection)**: on a training slice the target battles each reference model;
  every prompt where the target lost (the winner's score above the target's by more than
  ``threshold``) becomes one example with the best winning answer: the highest judge score among
  the references that beat the target (ties: the first in ``references``). A multi-turn
  conversation keeps all its turns.
- **DPO / reward-model pairs**: the target and the references answer a slice and battle pairwise;
  per prompt the answer with the most wins is chosen and the one with the fewest rejected (ties
  broken by the mean judge score over its battles, which for a multi-turn prompt is the mean over
  turns; then by model order). Pairs whose score gap is at most ``k`` (default 1) are dropped. A
  pair's ``margin`` is that gap (TRL's RewardTrainer reads it).
- **Baselines** for the paper's ablation (pair-judge vs original data): ``all`` (every answer of
  every reference, no judging), ``random`` (a seeded sample of ``all`` of the pair-judge set's
  size), ``longest`` (the longest answers, same size). Preference baselines: ``all`` (every
  prompt's most/fewest-wins pair, no gap filter), ``random`` (a seeded sample of those, same
  size), ``longest`` (longest answer chosen, shortest rejected, by length gap; no judging).

Options from the field, off by default: **RIP** filtering (Yu et al. 2025, "RIP: Better Models by
Survival of the Fittest Prompts", arXiv 2501.18578): a prompt whose *rejected* answer scores low,
is short, or whose chosen-rejected gap is very large is likely a low-quality prompt, and its pair
is dropped.

Every example records its prompt, slice, round and which model supplied each answer.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import Field

from ..records import Answer, Battle, PreferencePair, Prompt, SFTExample
from ..tasks.shortcuts import POLICIES, same_answer

SFT_SELECTIONS = ("pair_judge", "all", "random", "longest")
PAIR_SELECTIONS = ("pair_judge", "all", "random", "longest")


class SFTItem(SFTExample):
    """An SFT example (``messages``, TRL's conversational format) with its provenance."""

    prompt_id: str
    slice: str = ""
    round: int = 0
    source_model: str = Field("", description="the model whose answer this is (the reference that won)")
    score: float | None = Field(None, description="judge score of that answer (mean over turns)")
    target_score: float | None = Field(None, description="the target's score on the prompt")
    selection: str = "pair_judge"


class PreferenceItem(PreferencePair):
    """A DPO / reward-model pair (TRL's conversational preference format) with its provenance."""

    prompt_id: str
    slice: str = ""
    round: int = 0
    chosen_score: float | None = None
    rejected_score: float | None = None
    chosen_wins: int = 0
    rejected_wins: int = 0
    selection: str = "pair_judge"


@dataclass(frozen=True)
class RipFilter:
    """RIP-style pair filtering (arXiv 2501.18578): each threshold is off when None.

    ``min_rejected_score``: drop a pair whose rejected answer scores below this (the prompt is
    likely unanswerable or ill-posed); ``min_rejected_length``: drop a pair whose rejected answer
    is shorter (in characters); ``max_gap``: drop a pair whose score gap is above this.
    """

    min_rejected_score: float | None = None
    min_rejected_length: int | None = None
    max_gap: float | None = None

    def keeps(self, item: PreferenceItem) -> bool:
        if self.min_rejected_score is not None and (item.rejected_score or 0.0) < self.min_rejected_score:
            return False
        if self.min_rejected_length is not None and len(_text(item.rejected)) < self.min_rejected_length:
            return False
        return not (self.max_gap is not None and item.margin > self.max_gap)


# ---- shared helpers ------------------------------------------------------------------


def conversation_messages(prompt: Prompt, replies: Sequence[str]) -> list[dict[str, str]]:
    """Return the whole conversation: each user turn followed by the model's reply to it."""
    messages: list[dict[str, str]] = []
    for turn, reply in zip(prompt.turns, replies):
        messages.append({"role": "user", "content": turn})
        messages.append({"role": "assistant", "content": reply})
    return messages


def split_pair(prompt: Prompt, chosen: Sequence[str], rejected: Sequence[str]) -> tuple[list, list, list]:
    """Return TRL's (prompt, chosen, rejected) message lists.

    A single-turn prompt gives ``[user]``, ``[assistant]``, ``[assistant]``. A multi-turn prompt keeps
    every turn: the prompt is the first user turn and each side continues with its own
    conversation (its replies and the later user turns), as that model held it.
    """
    head = [{"role": "user", "content": prompt.turns[0]}]
    return head, conversation_messages(prompt, chosen)[1:], conversation_messages(prompt, rejected)[1:]


def _text(messages: Sequence[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages if m.get("role") == "assistant")


def _side(b: Battle, model: str) -> tuple[float | None, float | None, int]:
    """Return (model's score, opponent's score, +1 win / -1 loss / 0 tie) of ``model`` in ``b``."""
    if b.model_a == model:
        mine, theirs, won = b.score_a, b.score_b, "model_a"
    else:
        mine, theirs, won = b.score_b, b.score_a, "model_b"
    result = 0 if b.outcome == "tie" else (1 if b.outcome == won else -1)
    return mine, theirs, result


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# ---- SFT -------------------------------------------------------------------------------


def harvest_sft(
    prompts: Sequence[Prompt],
    answers: Sequence[Answer],
    battles: Sequence[Battle],
    *,
    target: str,
    references: Sequence[str],
    threshold: float = 0.0,
    min_score: float | None = None,
    slice_name: str = "",
    round_index: int = 0,
) -> list[SFTItem]:
    """Return the pair-judge SFT set: one example per prompt the target lost, with the best winner's answer.

    The target lost to a reference on a prompt when their battles there favour the reference (more
    wins; several games of one pair are pooled) and the reference's mean score is above the target's
    by more than ``threshold``. Among the references that beat the target, the highest-scored
    answer is taken (ties: the first in ``references``). ``min_score``: a winner whose mean score is
    below it supplies nothing (a verifier's 10: only exactly right answers; a win on partial credit,
    a sum within 10% or a word right but for its case, would teach a wrong answer).
    """
    by_key = {(a.prompt_id, a.model): a for a in answers}
    refs = list(references)
    games: dict[tuple[str, str], list[Battle]] = defaultdict(list)
    for b in battles:
        pair = {b.model_a, b.model_b}
        if target in pair and len(pair) == 2:
            other = b.model_b if b.model_a == target else b.model_a
            if other in refs:
                games[(b.prompt_id, other)].append(b)
    out: list[SFTItem] = []
    for p in prompts:
        best: tuple[float, int, str, float | None] | None = None
        for order, ref in enumerate(refs):
            bs = games.get((p.id, ref))
            if not bs or (p.id, ref) not in by_key:
                continue
            sides = [_side(b, ref) for b in bs]
            wins = sum(1 for _, _, r in sides if r > 0) - sum(1 for _, _, r in sides if r < 0)
            ref_scores = [s for s, _, _ in sides if s is not None]
            tgt_scores = [t for _, t, _ in sides if t is not None]
            ref_score, tgt_score = _mean(ref_scores), _mean(tgt_scores)
            if ref_score is not None and tgt_score is not None:
                gap = ref_score - tgt_score
            else:  # a judge that gives verdicts only: the battles' own gaps
                signed = [b.score_gap * (1 if r > 0 else -1 if r < 0 else 0) for b, (_, _, r) in zip(bs, sides)]
                gap = _mean(signed) or 0.0
            if wins <= 0 or gap <= threshold:
                continue
            if min_score is not None and (ref_score is None or ref_score < min_score):
                continue
            rank = (ref_score if ref_score is not None else gap, -order)
            if best is None or rank > (best[0], best[1]):
                best = (rank[0], rank[1], ref, tgt_score)
        if best is None:
            continue
        ref = best[2]
        ans = by_key[(p.id, ref)]
        out.append(SFTItem(
            messages=conversation_messages(p, ans.turns), prompt_id=p.id, slice=slice_name, round=round_index,
            source_model=ref, score=best[0], target_score=best[3], selection="pair_judge",
        ))
    return out


def own_right_sft(
    prompts: Sequence[Prompt],
    answers: Sequence[Answer],
    battles: Sequence[Battle],
    *,
    target: str,
    min_score: float,
    slice_name: str = "",
    round_index: int = 0,
    selection: str = "balance_fill",
) -> list[SFTItem]:
    """Return the target's own answers that its battles score at least ``min_score`` (mean over them).

    What the target already gets right: the other side of a balanced category (``balance_items``'
    ``fill``), or, with ``harvest.own_right`` (``selection="own_right"``), examples beside what it lost
    (ReST-EM keeps every correct sample, not only those of prompts the model failed).
    """
    by_key = {(a.prompt_id, a.model): a for a in answers}
    mine: dict[str, list[float]] = defaultdict(list)
    for b in battles:
        if target in (b.model_a, b.model_b) and b.model_a != b.model_b:
            score = _side(b, target)[0]
            if score is not None:
                mine[b.prompt_id].append(score)
    out = []
    for p in prompts:
        score = _mean(mine.get(p.id, []))
        ans = by_key.get((p.id, target))
        if score is None or ans is None or score < min_score:
            continue
        out.append(SFTItem(messages=conversation_messages(p, ans.turns), prompt_id=p.id, slice=slice_name,
                           round=round_index, source_model=target, score=score, target_score=score,
                           selection=selection))
    return out


def with_own_right(items: Sequence[SFTItem], right: Sequence[SFTItem]) -> list[SFTItem]:
    """Return ``items``, then the target's right answers (``own_right_sft``) on prompts no item is from.

    ``harvest.own_right``: a prompt the target lost keeps the winner's answer; one it got right adds its own.
    """
    lost = {it.prompt_id for it in items}
    return [*items, *(it for it in right if it.prompt_id not in lost)]


def _all_sft(prompts: Sequence[Prompt], answers: Sequence[Answer], references: Sequence[str],
             slice_name: str, round_index: int) -> list[SFTItem]:
    by_key = {(a.prompt_id, a.model): a for a in answers}
    out = []
    for p in prompts:
        for ref in references:
            a = by_key.get((p.id, ref))
            if a is not None and a.turns and any(t.strip() for t in a.turns):
                out.append(SFTItem(messages=conversation_messages(p, a.turns), prompt_id=p.id, slice=slice_name,
                                   round=round_index, source_model=ref, selection="all"))
    return out


def select_sft(
    selection: str,
    prompts: Sequence[Prompt],
    answers: Sequence[Answer],
    battles: Sequence[Battle],
    *,
    target: str,
    references: Sequence[str],
    threshold: float = 0.0,
    min_score: float | None = None,
    size: int | None = None,
    seed: int = 0,
    slice_name: str = "",
    round_index: int = 0,
) -> list[SFTItem]:
    """Return the SFT set of ``selection``: pair_judge, or a baseline (all, random, longest).

    ``random`` and ``longest`` take ``size`` examples (default: the pair-judge set's size) from the
    ``all`` pool: every non-empty answer of every reference on the slice.
    """
    if selection not in SFT_SELECTIONS:
        raise ValueError(f"unknown SFT selection {selection!r}; use one of {', '.join(SFT_SELECTIONS)}")
    judged = harvest_sft(prompts, answers, battles, target=target, references=references, threshold=threshold,
                         min_score=min_score, slice_name=slice_name, round_index=round_index)
    if selection == "pair_judge":
        return judged
    pool = _all_sft(prompts, answers, references, slice_name, round_index)
    if selection == "all":
        return pool
    n = min(len(pool), len(judged) if size is None else size)
    if selection == "random":
        picked = random.Random(seed).sample(pool, n)
    else:
        picked = sorted(pool, key=lambda it: (-len(_text(it.messages)), it.prompt_id, it.source_model))[:n]
    return [it.model_copy(update={"selection": selection}) for it in picked]


# ---- DPO and reward-model pairs ----------------------------------------------------------


@dataclass
class _Standing:
    model: str
    order: int
    wins: int
    score: float | None


def prompt_standings(battles: Sequence[Battle], models: Sequence[str]) -> dict[str, list[_Standing]]:
    """Return, per prompt, each model's wins and mean judge score over its battles there."""
    order = {m: i for i, m in enumerate(models)}
    wins: dict[tuple[str, str], int] = defaultdict(int)
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    seen: dict[str, set[str]] = defaultdict(set)
    for b in battles:
        if b.model_a not in order or b.model_b not in order or b.model_a == b.model_b:
            continue
        for m in (b.model_a, b.model_b):
            mine, _, result = _side(b, m)
            seen[b.prompt_id].add(m)
            if result > 0:
                wins[(b.prompt_id, m)] += 1
            if mine is not None:
                scores[(b.prompt_id, m)].append(mine)
    return {
        pid: sorted((_Standing(m, order[m], wins[(pid, m)], _mean(scores[(pid, m)])) for m in ms),
                    key=lambda s: s.order)
        for pid, ms in seen.items()
    }


def harvest_pairs(
    prompts: Sequence[Prompt],
    answers: Sequence[Answer],
    battles: Sequence[Battle],
    *,
    models: Sequence[str],
    k: float = 1.0,
    rip: RipFilter | None = None,
    slice_name: str = "",
    round_index: int = 0,
    selection: str = "pair_judge",
) -> list[PreferenceItem]:
    """Return DPO / reward-model pairs: per prompt, most wins chosen, fewest wins rejected.

    Ties in wins are broken by the mean judge score (then by the order of ``models``: the earlier
    model is chosen, the later rejected). A pair is kept when the chosen answer's mean score is above
    the rejected one's by more than ``k``; its margin is that gap. ``rip`` drops pairs of prompts
    that look low quality. Prompts with fewer than two models are skipped.
    """
    by_key = {(a.prompt_id, a.model): a for a in answers}
    standings = prompt_standings(battles, models)
    out = []
    for p in prompts:
        st = [s for s in standings.get(p.id, []) if (p.id, s.model) in by_key and s.score is not None]
        if len(st) < 2:
            continue
        chosen = max(st, key=lambda s: (s.wins, s.score, -s.order))
        rejected = min(st, key=lambda s: (s.wins, s.score, -s.order))
        if chosen.model == rejected.model:
            continue
        gap = chosen.score - rejected.score  # type: ignore[operator]  # st keeps scored standings only
        if gap <= k:
            continue
        head, ch, rj = split_pair(p, by_key[(p.id, chosen.model)].turns, by_key[(p.id, rejected.model)].turns)
        item = PreferenceItem(
            prompt=head, chosen=ch, rejected=rj, margin=gap, chosen_model=chosen.model, rejected_model=rejected.model,
            prompt_id=p.id, slice=slice_name, round=round_index, chosen_score=chosen.score,
            rejected_score=rejected.score, chosen_wins=chosen.wins, rejected_wins=rejected.wins, selection=selection,
        )
        if rip is None or rip.keeps(item):
            out.append(item)
    return out


def select_pairs(
    selection: str,
    prompts: Sequence[Prompt],
    answers: Sequence[Answer],
    battles: Sequence[Battle],
    *,
    models: Sequence[str],
    k: float = 1.0,
    rip: RipFilter | None = None,
    size: int | None = None,
    seed: int = 0,
    slice_name: str = "",
    round_index: int = 0,
) -> list[PreferenceItem]:
    """Return the preference pairs of ``selection``: pair_judge, or a baseline (all, random, longest)."""
    if selection not in PAIR_SELECTIONS:
        raise ValueError(f"unknown pair selection {selection!r}; use one of {', '.join(PAIR_SELECTIONS)}")
    judged = harvest_pairs(prompts, answers, battles, models=models, k=k, rip=rip, slice_name=slice_name,
                           round_index=round_index)
    if selection == "pair_judge":
        return judged
    n = len(judged) if size is None else size
    if selection in ("all", "random"):
        pool = harvest_pairs(prompts, answers, battles, models=models, k=float("-inf"), selection="all",
                             slice_name=slice_name, round_index=round_index)
        if selection == "all":
            return pool
        picked = random.Random(seed).sample(pool, min(n, len(pool)))
        return [it.model_copy(update={"selection": "random"}) for it in picked]
    return _longest_pairs(prompts, answers, models, n, slice_name=slice_name, round_index=round_index)


def _longest_pairs(prompts: Sequence[Prompt], answers: Sequence[Answer], models: Sequence[str], n: int,
                   slice_name: str, round_index: int) -> list[PreferenceItem]:
    """Longest answer chosen, shortest rejected, the ``n`` prompts with the largest length gap (no judge)."""
    by_key = {(a.prompt_id, a.model): a for a in answers}
    cands = []
    for p in prompts:
        have = [(len("\n".join(by_key[(p.id, m)].turns)), -i, m) for i, m in enumerate(models) if (p.id, m) in by_key]
        if len(have) < 2:
            continue
        long_, short = max(have), min(have)
        if long_[0] == short[0]:
            continue
        head, ch, rj = split_pair(p, by_key[(p.id, long_[2])].turns, by_key[(p.id, short[2])].turns)
        cands.append(PreferenceItem(
            prompt=head, chosen=ch, rejected=rj, margin=float(long_[0] - short[0]), chosen_model=long_[2],
            rejected_model=short[2], prompt_id=p.id, slice=slice_name, round=round_index, selection="longest",
        ))
    cands.sort(key=lambda it: (-it.margin, it.prompt_id))
    return cands[:n]


def per_model_counts(items: Sequence[SFTItem | PreferenceItem]) -> dict[str, int]:
    """Return how many examples (or chosen answers) each model supplied."""
    counts: dict[str, int] = defaultdict(int)
    for it in items:
        counts[it.source_model if isinstance(it, SFTItem) else it.chosen_model] += 1
    return dict(sorted(counts.items()))


# ---- balance against shortcuts -------------------------------------------------------------

BALANCED_PAIRS = (("first number", "second number"), ("yes", "no"),
                  ("ascending, whatever asked", "descending, whatever asked"))
"""The surface rules a category's data is balanced over (``tasks.shortcuts.POLICIES``), in opposite pairs."""
BALANCED_POLICIES = tuple(rule for pair in BALANCED_PAIRS for rule in pair)


def _taught(item: SFTItem | PreferenceItem) -> str:
    """The answer an item teaches: the SFT example's first reply, or the pair's chosen one."""
    messages = item.messages if isinstance(item, SFTItem) else item.chosen
    replies = [m["content"] for m in messages if m.get("role") == "assistant"]
    return replies[0] if replies else ""


def shortcut_key(prompt: Prompt, answer: str) -> tuple[str, ...]:
    """Return the balanced policies (``BALANCED_POLICIES``) whose answer to ``prompt`` is ``answer``'s first line."""
    line = next((ln for ln in answer.splitlines() if ln.strip()), "")
    question = prompt.turns[0] if prompt.turns else ""
    return tuple(name for name in BALANCED_POLICIES if same_answer(line, POLICIES[name](question)))


Item = TypeVar("Item", SFTItem, PreferenceItem)


def balance_items(items: Sequence[Item], prompts: Sequence[Prompt], *, seed: int = 0,
                  fill: Sequence[Item] = ()) -> list[Item]:
    """Return ``items`` balanced, per category, over the shortcut each taught answer would also fit.

    Within a category, the items whose answer is what a surface rule says (the first number, the
    second, yes, no, ascending, descending) are grouped by that rule, and every group is cut (a
    seeded sample) to the smallest group's size: data where the answer is second on 19 of 30 items
    teaches "say the second number", balanced data does not. A category whose answers fit only one
    rule loses those items (balanced against a missing group is none). Items no rule fits are kept.
    Order is kept.

    ``fill`` (the target's own right answers, ``own_right_sft``) makes up a short side instead of the
    long side being cut: a target that says "yes" to everything loses only on "no" items, so what it
    lost is one-sided by construction, and balance alone would drop all of it. A side is filled up to
    the longest side of ``items`` at most (fillers never outnumber what was lost), items first; fillers
    come after the items, in their own order, and only in categories ``items`` has rule groups in.
    """
    by_id = {p.id: p for p in prompts}
    merged: list[Item] = list(items) + list(fill)
    lost = len(items)
    groups: dict[str, dict[tuple[str, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
    keep: set[int] = set()
    for i, it in enumerate(merged):
        p = by_id.get(it.prompt_id)
        key = shortcut_key(p, _taught(it)) if p is not None else ()
        if not key:
            if i < lost:
                keep.add(i)
        else:
            groups[p.category or "" if p is not None else ""][key].append(i)
    rng = random.Random(seed)
    for cat in sorted(groups):
        rules = groups[cat]
        # the rules a category offers come in pairs (first/second, yes/no, ascending/descending)
        offered = {rule for key, ix in rules.items() for rule in key if any(i < lost for i in ix)}
        need = [frozenset(p) for p in BALANCED_PAIRS if offered & set(p)]
        sides = [side for pair in need for side in pair]

        # per side: (lost items, all items) that teach it
        lost_n = {side: sum(i < lost for key, ix in rules.items() if side in key for i in ix) for side in sides}
        all_n = {side: sum(len(ix) for key, ix in rules.items() if side in key) for side in sides}
        cap = min(min(all_n.values(), default=0), max(lost_n.values(), default=0))
        taken: dict[str, int] = defaultdict(int)
        for own in (True, False):  # the lost items first, then fillers for what is still short
            for key in sorted(rules):
                ix = [i for i in rules[key] if (i < lost) == own]
                rng.shuffle(ix)
                for i in ix:
                    if all(taken[side] < cap for side in key):
                        keep.add(i)
                        for side in key:
                            taken[side] += 1
    return [it for i, it in enumerate(merged) if i in keep]
