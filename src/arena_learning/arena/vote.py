"""Vote: one answer from k seeded samples of the same model (``ModelSpec.vote``).

A model with ``vote: {k, temperature, seed, method}`` answers each turn k times; sample i is drawn at
the vote's temperature with seed ``seed + i``, each a call through the ledger (``answers.turn_requests``),
and one sample is kept as the turn's answer, in its own words:

- ``majority`` (self-consistency, Wang et al. 2022): the sample whose normalised answer is the most
  common. Normalised: stripped, whitespace collapsed, case-folded; a numeric answer (the prompt's
  checker is ``numeric``, or the whole answer is one number) by its first number, so "42" and
  "42 minutes" agree. A tie goes to the answer given first (the earliest sample).
- ``best_of_k``: the sample the verifier scores highest against the prompt's reference answer (the
  earliest of equal scores). It has seen the reference: an oracle teacher for harvesting training
  data, not a fair contestant (``arena plan`` and the leaderboard say so).

A sample that failed casts no vote (it is asked again on the next run, as every failed call); a turn
with no sample back has no answer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ..config import VoteSpec
from ..records import Prompt
from ..tasks import check_turns

_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
_ONE_NUMBER = re.compile(rf"\s*{_NUMBER.pattern}\s*\.?\s*")


def is_numeric(prompt: Prompt | None, text: str) -> bool:
    """Return whether ``text`` votes by its first number: the prompt's checker is numeric, or it is one number."""
    return (prompt is not None and prompt.checker == "numeric") or _ONE_NUMBER.fullmatch(text) is not None


def vote_key(text: str, numeric: bool = False) -> str:
    """Return the form of ``text`` that votes: its first number if ``numeric`` (and it has one), else the text
    stripped, its whitespace collapsed, case-folded."""
    if numeric:
        found = _NUMBER.search(text)
        if found is not None:
            return repr(float(found.group().replace(",", "")))  # "7", "7.0" and "7.00" are one answer
    return _SPACE.sub(" ", text.strip()).casefold()


def majority(texts: Sequence[str], prompt: Prompt | None = None) -> int:
    """Return the index of the sample that carries the most common answer of ``texts`` (the earliest on a tie)."""
    if not texts:
        raise ValueError("majority of no samples")
    keys = [vote_key(t, is_numeric(prompt, t)) for t in texts]
    counts = Counter(keys)
    top = max(counts.values())
    return next(i for i, key in enumerate(keys) if counts[key] == top)


def best_of(scores: Sequence[float]) -> int:
    """Return the index of the highest score (the earliest of equal ones)."""
    if not scores:
        raise ValueError("best of no samples")
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def reference_scores(prompt: Prompt, replies: Sequence[str], turn: int, texts: Sequence[str]) -> list[float]:
    """Return the verifier's score 0-10 of each of ``texts`` as the answer to ``turn`` after ``replies``."""
    return [check_turns(prompt, [*replies[:turn], text])[turn] for text in texts]


def choose(vote: VoteSpec, prompt: Prompt, replies: Sequence[str], turn: int, texts: Sequence[str]) -> int:
    """Return the index of the sample of ``texts`` that ``vote`` keeps as the answer to ``turn``."""
    if vote.method == "best_of_k":
        return best_of(reference_scores(prompt, replies, turn, texts))
    return majority(texts, prompt)


def needs_reference(vote: VoteSpec | None) -> bool:
    """Return whether ``vote`` picks its samples against the prompts' reference answers."""
    return vote is not None and vote.method == "best_of_k"


def missing_references(prompts: Sequence[Prompt]) -> list[str]:
    """Return the ids of ``prompts`` with no reference answer the verifier can check (best_of_k cannot pick)."""
    return [p.id for p in prompts if p.checker is None or not p.reference]


ORACLE_MARK = "(oracle)"
"""What the leaderboard writes after an oracle's name (a model with ``vote.method: best_of_k``)."""
ORACLE_CAPTION = ("(oracle): vote best_of_k, its samples picked against the reference answers: a teacher for "
                  "harvesting, not a fair contestant")


def cost_note(vote: VoteSpec) -> str:
    """Return what ``arena plan`` says of a vote model: its k samples, and whether it is an oracle."""
    note = f"vote {vote.method}: {vote.k} samples per prompt: {vote.k} x the cost"
    if vote.method == "best_of_k":
        note += ("; best_of_k picks by the reference answers: an oracle teacher for harvesting, not a fair "
                 "contestant")
    return note
