"""Shortcut policies: answers that read the question's surface and never do the task.

A category is balanced when each policy here is right (checker score 10) no more often than the
category's chance level (``world.CATEGORY_INFO[cat].chance``). A model's gain in a category is a
shortcut when its answers follow one policy (agree with it on most items) and its exact share is no
better than that policy's: it moved from one surface rule to another (in suite 1 the flywheel's
student went from "the first number" to "the second number" in comparison and gained 7 answers).

Hand-written: these policies are the suite's own rules turned around; no library has them.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..records import Prompt
from .checks import check

_NUMBER = re.compile(r"-?\d+")
_TOKEN = re.compile(r"[a-z0-9]+")
_QUOTED = re.compile(r"'([^']*)'")

CHANCE_FLOOR = 0.25
"""``SurfaceChance``'s default floor: what an answer would earn without its question counts from this much on."""


def _nums(q: str) -> list[int]:
    return [int(x) for x in _NUMBER.findall(q)]


def _pick(q: str, i: int) -> str:
    nums = _nums(q)
    return str(nums[i]) if -len(nums) <= i < len(nums) else ""


def _listed(q: str, key: Callable[[list[int]], list[int]]) -> str:
    nums = _nums(q)
    return ", ".join(str(n) for n in key(nums)) if nums else ""


def _quoted(q: str) -> str:
    m = _QUOTED.search(q)
    return m.group(1) if m else ""


POLICIES: dict[str, Callable[[str], str]] = {
    "yes": lambda q: "yes",
    "no": lambda q: "no",
    "first number": lambda q: _pick(q, 0),
    "second number": lambda q: _pick(q, 1),
    "last number": lambda q: _pick(q, -1),
    "largest number": lambda q: str(max(_nums(q))) if _nums(q) else "",
    "smallest number": lambda q: str(min(_nums(q))) if _nums(q) else "",
    "numbers as shown": lambda q: _listed(q, list),
    "numbers reversed": lambda q: _listed(q, lambda xs: xs[::-1]),
    "ascending, whatever asked": lambda q: _listed(q, sorted),
    "descending, whatever asked": lambda q: _listed(q, lambda xs: sorted(xs, reverse=True)),
    "quoted text as shown": _quoted,
    "longest quoted word": lambda q: max(_quoted(q).split() or [""], key=len),
    "quoted text upper": lambda q: _quoted(q).upper(),
    "quoted text lower": lambda q: _quoted(q).lower(),
    "quoted text capitalized": lambda q: " ".join(w.capitalize() for w in _quoted(q).split()),
    "the question": lambda q: q,
    "yes or no": lambda q: "yes or no",
}
"""Name -> the answer it gives to a question; every policy reads only the question's surface."""


def _exact(prompt: Prompt, answer: str) -> bool:
    return check(prompt, [answer]) == 10.0


def policy_exact(prompts: Sequence[Prompt]) -> dict[str, dict[str, float]]:
    """Return {category: {policy: exact share}} over ``prompts``, the best constant answer included.

    The constant is the category's most common reference answer, the strongest answer that
    ignores the question altogether (on a balanced category: its chance level).
    """
    by_cat: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        by_cat[p.category or ""].append(p)
    out: dict[str, dict[str, float]] = {}
    for cat, items in sorted(by_cat.items()):
        row = {name: sum(_exact(p, fn(p.turns[0])) for p in items) / len(items) for name, fn in POLICIES.items()}
        common, count = Counter((p.reference or [''])[0] for p in items).most_common(1)[0]
        row[f"constant {common!r}"] = count / len(items)
        out[cat] = row
    return out


def _tokens(text: str) -> list[str]:
    """The first non-empty line's lowercase words and numbers: "Yes!" and "yes." are one answer."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    return _TOKEN.findall(first.lower())


class SurfaceChance:
    """What an answer would earn without reading its question, on the categories of ``prompts`` (0-1).

    Two ways an answer can ignore its question, and what each earns:

    - it is what a surface policy (``POLICIES``: "yes", the first number, ascending whatever asked)
      gives this question: the policy's mean checker score (0-1, partial credit included) on the
      category's prompts;
    - it fits the category's questions whatever they ask (a constant in any wording: "Yes, it is."):
      its own mean checker score, 0-1, on the category's prompts (its own prompt and up to ``others``
      more, a seeded sample where there are more).

    ``of(prompt, answer)`` is the larger of the two where it reaches ``floor``, else 0. A reward minus it
    pays an answer only for what it gets right beyond chance: a bare "yes" on a balanced yes/no category
    earns +0.5 where right and -0.5 where wrong, 0 on average, as an empty answer does, so a policy that
    ignores the question gains nothing over one that says nothing (``training.rl.chance_corrected``:
    the verifier's reward taught a 270M model "no" to 20 of 24 yes/no items, stop 31).

    ``floor``: below it an answer is a guess, not a rule, and nothing is taken off. Without it a wrong
    sum lost the few hundredths its near misses on other prompts would earn, an empty answer became the
    best reply to every question the model got wrong, and GRPO, which scales each prompt's rewards by
    their spread, made that difference large: an RL stage learned to answer nothing (stop 32: 1 exact
    answer of 288, from 21).
    """

    def __init__(self, prompts: Sequence[Prompt], *, others: int = 64, seed: int = 0,
                 floor: float = CHANCE_FLOOR) -> None:
        self.by_cat: dict[str, list[Prompt]] = defaultdict(list)
        for p in prompts:
            if p.checker is not None and p.reference and p.turns:
                self.by_cat[p.category or ""].append(p)
        self.rates = {cat: {name: sum(check(p, [fn(p.turns[0])]) for p in items) / (10.0 * len(items))
                            for name, fn in POLICIES.items()} for cat, items in self.by_cat.items()}
        self.others = others
        self.rng_seed = seed
        self.floor = floor

    def _category(self, prompt: Prompt) -> list[Prompt]:
        items = [p for p in self.by_cat.get(prompt.category or "", []) if p.id != prompt.id]
        if len(items) > self.others:
            items = random.Random(f"{self.rng_seed}:{prompt.id}").sample(items, self.others)
        return [prompt, *items]

    def of(self, prompt: Prompt, answer: str) -> float:
        """Return what ``answer`` would earn on ``prompt``'s category without reading ``prompt`` (0-1)."""
        words = _tokens(answer)
        if not words or not prompt.turns:
            return 0.0
        rates = self.rates.get(prompt.category or "", {})
        question = prompt.turns[0]
        best = max((rates.get(name, 0.0) for name, fn in POLICIES.items()
                    if (said := fn(question)).strip() and _tokens(said) == words), default=0.0)
        items = self._category(prompt)
        best = max(best, sum(check(p, [answer]) for p in items) / (10.0 * len(items)))
        return best if best >= self.floor else 0.0


@dataclass(frozen=True)
class Shortcut:
    """A category where a model's answers follow a shortcut policy."""

    category: str
    policy: str
    agreement: float
    """Share of the model's answers in the category that equal the policy's answer."""
    exact: float
    """The model's exact share in the category."""
    policy_exact: float
    """The policy's own exact share there."""


def same_answer(a: str, b: str) -> bool:
    """Whether two answers are the same text, but for case, spacing, quotes and a final period."""
    return " ".join(a.lower().split()).strip(" .'\"") == " ".join(b.lower().split()).strip(" .'\"")


def follows_shortcut(prompts: Sequence[Prompt], answers: dict[str, str], *, agreement: float = 0.8,
                     margin: float = 0.1) -> list[Shortcut]:
    """Return the categories whose answers (prompt id -> first-turn answer) follow a shortcut policy.

    A category is listed when one policy gives the model's answer (its first line) on at least
    ``agreement`` of the category's answered items and the model's exact share there exceeds that
    policy's own by less than ``margin``: what it gets right, the policy would get right too. A
    policy counts only where it has an answer (no number in the question: "the first number" says
    nothing, and an empty reply does not follow it) and only in a category where it answers at
    least half the items. Each category lists its one best-agreeing policy (ties: ``POLICIES`` order).
    """
    by_cat: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        if p.id in answers:
            by_cat[p.category or ""].append(p)
    found: list[Shortcut] = []
    for cat, items in sorted(by_cat.items()):
        firsts = {p.id: next((ln for ln in answers[p.id].splitlines() if ln.strip()), "") for p in items}
        exact = sum(_exact(p, answers[p.id]) for p in items) / len(items)
        best: Shortcut | None = None
        for name, fn in POLICIES.items():
            said = {p.id: fn(p.turns[0]) for p in items}
            applies = [p for p in items if said[p.id].strip()]
            if len(applies) * 2 < len(items):
                continue
            agree = sum(same_answer(firsts[p.id], said[p.id]) for p in applies) / len(applies)
            own = sum(_exact(p, said[p.id]) for p in items) / len(items)
            if agree >= agreement and exact < own + margin and (best is None or agree > best.agreement):
                best = Shortcut(cat, name, round(agree, 3), round(exact, 3), round(own, 3))
        if best is not None:
            found.append(best)
    return found
