"""Each voter's figures and the rule that flags a voter whose votes should not count.

Control items have a right answer: one answer shown twice is a tie (or both bad), an empty answer
loses to a real one. A voter who clicks without reading fails them often (a random clicker fails
an empty control 3 times in 4, an identical one 1 time in 2); an honest voter rarely. Repeats (a pair
the voter already voted on, shown in the other order) measure consistency; it is reported, and only
flags when the rule asks (an honest voter is often inconsistent on two answers of equal worth).
Votes faster than ``fast_seconds`` cannot have been read.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..arena.audit import battle_key, oriented_code
from ..records import Vote
from .votes import VERDICT_OUTCOME


@dataclass(frozen=True)
class VoterRule:
    """When a voter is flagged (and left out of the human board and the audit).

    Attributes:
        min_controls: checked controls (identical and empty) needed before failures can flag.
        max_control_fail: flagged when the share of checked controls failed is above this.
        fast_seconds: a vote taken in less time than this is too fast to have been read.
        max_fast_share: flagged when more than this share of the voter's votes are too fast ...
        min_votes_for_fast: ... once the voter has cast this many.
        min_consistency: flagged when the share of repeats with the same verdict is below this (None: never),
            once the voter has ``min_repeats`` repeats.
        min_repeats: repeats needed before consistency can flag.
    """

    min_controls: int = 6
    max_control_fail: float = 0.34
    fast_seconds: float = 2.0
    max_fast_share: float = 0.5
    min_votes_for_fast: int = 10
    min_consistency: float | None = None
    min_repeats: int = 3


@dataclass
class VoterFigures:
    """One voter's figures. Shares are None when their denominator is 0."""

    voter: str
    votes: int
    real: int
    controls: int
    control_fails: int
    control_fail_share: float | None
    repeats: int
    consistent: int
    consistency: float | None
    fast: int
    fast_share: float | None
    median_seconds: float | None
    both_bad: int
    flagged: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def control_passed(vote: Vote) -> bool | None:
    """Return whether a checked control (identical, empty) got its right answer; None for other votes."""
    if vote.control == "identical":
        return vote.verdict in ("tie", "both_bad")
    if vote.control == "empty":
        return vote.verdict == ("b" if vote.model_a == "" else "a")
    return None


def voter_figures(votes: Sequence[Vote], rule: VoterRule | None = None) -> list[VoterFigures]:
    """Return the figures of every voter of ``votes`` (retracted ones left out), flagged by ``rule``, by name."""
    rule = rule or VoterRule()
    by_voter: dict[str, list[Vote]] = {}
    for v in votes:
        if not v.retracted:
            by_voter.setdefault(v.voter, []).append(v)
    return [_figures(name, by_voter[name], rule) for name in sorted(by_voter)]


def flagged_voters(votes: Sequence[Vote], rule: VoterRule | None = None) -> set[str]:
    """Return the names of the voters ``rule`` flags."""
    return {f.voter for f in voter_figures(votes, rule) if f.flagged}


def _figures(voter: str, votes: list[Vote], rule: VoterRule) -> VoterFigures:
    checks = [ok for ok in map(control_passed, votes) if ok is not None]
    fails = checks.count(False)
    first: dict[tuple[str, str, str], int] = {}
    for v in votes:
        if v.control is None:
            key = battle_key(v.prompt_id, v.model_a, v.model_b)
            first.setdefault(key, oriented_code(VERDICT_OUTCOME[v.verdict], v.model_a, key))
    repeats = consistent = 0
    for v in votes:
        key = battle_key(v.prompt_id, v.model_a, v.model_b)
        if v.control == "repeat" and key in first:
            repeats += 1
            consistent += oriented_code(VERDICT_OUTCOME[v.verdict], v.model_a, key) == first[key]
    fast = sum(v.seconds < rule.fast_seconds for v in votes)
    f = VoterFigures(
        voter=voter, votes=len(votes), real=sum(v.control is None for v in votes), controls=len(checks),
        control_fails=fails, control_fail_share=fails / len(checks) if checks else None, repeats=repeats,
        consistent=consistent, consistency=consistent / repeats if repeats else None, fast=fast,
        fast_share=fast / len(votes) if votes else None,
        median_seconds=statistics.median(v.seconds for v in votes) if votes else None,
        both_bad=sum(v.verdict == "both_bad" for v in votes if v.control is None))
    if len(checks) >= rule.min_controls and fails / len(checks) > rule.max_control_fail:
        f.reasons.append(f"failed {fails} of {len(checks)} controls")
    if len(votes) >= rule.min_votes_for_fast and fast / len(votes) > rule.max_fast_share:
        f.reasons.append(f"{fast} of {len(votes)} votes under {rule.fast_seconds:g} s")
    if rule.min_consistency is not None and repeats >= rule.min_repeats and consistent / repeats < rule.min_consistency:
        f.reasons.append(f"same verdict on {consistent} of {repeats} repeats")
    f.flagged = bool(f.reasons)
    return f
