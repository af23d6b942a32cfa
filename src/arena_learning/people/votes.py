"""Votes as a judge: battles for the boards, labels for the audit, agreement between voters.

A vote is one battle of judge ``human`` (both bad rates as a tie and is counted apart). Control
items and retracted votes are never rated; voters the rule flags are left out unless asked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from itertools import combinations

from ..arena.audit import Agreement, BattleKey, HumanLabel, agreement_of_codes, battle_key, oriented_code
from ..records import Battle, Outcome, Vote
from . import HUMAN

VERDICT_OUTCOME: dict[str, Outcome] = {"a": "model_a", "b": "model_b", "tie": "tie", "both_bad": "tie"}
"""A vote's verdict as a battle outcome: both bad rates as a tie."""

CSV_WINNER = {"a": "model_a", "b": "model_b", "tie": "tie", "both_bad": "tie (bothbad)"}
"""A vote's verdict as the ``winner`` of a label file (``arena judge-audit --human FILE``)."""


def rated_votes(votes: Sequence[Vote], left_out: Collection[str] = ()) -> list[Vote]:
    """Return the votes that rate models: real items, not retracted, of voters not in ``left_out``."""
    return [v for v in votes if v.control is None and not v.retracted and v.voter not in left_out]


def vote_battles(votes: Sequence[Vote]) -> list[Battle]:
    """Return one battle of judge ``human`` per vote (give ``rated_votes``), models as shown."""
    return [Battle(prompt_id=v.prompt_id, model_a=v.model_a, model_b=v.model_b, outcome=VERDICT_OUTCOME[v.verdict],
                   judge=HUMAN) for v in votes]


def vote_labels(votes: Sequence[Vote]) -> list[HumanLabel]:
    """Return the votes as the audit's human labels (give ``rated_votes``), as a label file would hold them."""
    return [HumanLabel(v.prompt_id, v.model_a, v.model_b, VERDICT_OUTCOME[v.verdict], f"vote {v.vote_id} by {v.voter}")
            for v in votes]


def label_rows(votes: Sequence[Vote]) -> list[dict[str, str]]:
    """Return the votes as rows of a label file (prompt_id, model_a, model_b, winner, voter)."""
    return [{"prompt_id": v.prompt_id, "model_a": v.model_a, "model_b": v.model_b, "winner": CSV_WINNER[v.verdict],
             "voter": v.voter} for v in votes]


def voter_agreement(votes: Sequence[Vote]) -> Agreement:
    """Return the agreement between people who voted the same (prompt, pair), every two of them once.

    Each two votes by different voters on one battle make one comparison (a voter's later vote on a
    battle they voted before is a repeat, not a second opinion: their first counts).
    """
    first: dict[BattleKey, dict[str, int]] = defaultdict(dict)
    for v in votes:
        key = battle_key(v.prompt_id, v.model_a, v.model_b)
        first[key].setdefault(v.voter, oriented_code(VERDICT_OUTCOME[v.verdict], v.model_a, key))
    pairs = [(by[x], by[y]) for by in first.values() for x, y in combinations(sorted(by), 2)]
    return agreement_of_codes("voter", "other voter", pairs, 0, 0)
