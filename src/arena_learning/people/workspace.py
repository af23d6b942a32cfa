"""A workspace's votes and what can be voted on, read from its store."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..arena.audit import (
    HumanLabel,
    HumanLabels,
    WorkspaceAudit,
    audit_workspace,
    battle_key,
    battle_outcomes,
    human_agreement,
    oriented_code,
)
from ..errors import ArenaError
from ..records import Battle, Vote
from ..store import DEFAULT_SET, Store
from .quality import VoterFigures, VoterRule, voter_figures
from .schedule import Pool, judge_disagreements
from .votes import rated_votes, vote_battles, vote_labels, voter_agreement

RULE_META = "votes.rule"
"""Where ``arena vote`` saves the voter rule it was given, for the board and the audit to apply."""


@dataclass
class WorkspaceVotes:
    """A workspace's votes: all of them, each voter's figures, and those that rate (``rated``)."""

    votes: list[Vote]
    figures: list[VoterFigures]
    rated: list[Vote]
    left_out: list[str]


def workspace_votes(workspace: str | Path, set_name: str | None = DEFAULT_SET, rule: VoterRule | None = None,
                    keep_flagged: bool = False) -> WorkspaceVotes:
    """Return the votes of a workspace (of ``set_name``; None: every set), flagged voters left out unless kept."""
    with Store(workspace, readonly=True) as store:
        votes = store.get_votes(set_name)
        if rule is None:
            rule = saved_rule(store)
    figures = voter_figures(votes, rule)
    left_out = [] if keep_flagged else [f.voter for f in figures if f.flagged]
    return WorkspaceVotes(votes, figures, rated_votes(votes, set(left_out)), left_out)


def vote_pool(workspace: str | Path, set_name: str = DEFAULT_SET) -> Pool:
    """Return what can be voted on in a workspace's set, with the battles where its LLM judges disagree."""
    with Store(workspace, readonly=True) as store:
        prompts = store.get_prompts(set_name)
        answers = store.get_answers(set_name=set_name)
        judgments = store.get_judgments(set_name=set_name)
    by_judge: dict[str, list] = defaultdict(list)
    for j in judgments:
        if j.judge != "human":
            by_judge[j.judge].append(j)
    inconsistent = set()
    for games in by_judge.values():  # one judge against itself: the two orders' verdicts differ
        first: dict[tuple[str, str, str], set[int]] = defaultdict(set)
        for g in games:
            if g.status == "ok" and g.verdict is not None:
                key = battle_key(g.prompt_id, g.model_a, g.model_b)
                first[key].add({"model_a": 1, "tie": 0, "model_b": -1}[g.verdict] * (1 if g.model_a == key[1] else -1))
        inconsistent |= {k for k, results in first.items() if len(results) > 1}
    outcomes = {name: battle_outcomes(games) for name, games in by_judge.items()}
    return Pool(set_name, prompts, answers, judge_disagreements(outcomes, inconsistent))


def saved_rule(store: Store) -> VoterRule:
    """Return the voter rule ``arena vote`` saved in the workspace, else the default rule."""
    saved = store.get_meta(RULE_META)
    try:
        return VoterRule(**saved) if isinstance(saved, dict) else VoterRule()
    except TypeError as err:
        raise ArenaError(f"the voter rule saved in {store.root} does not fit this release ({err}): start `arena vote` "
                         "once to save it again") from None


def human_battles(workspace: str | Path, keep_flagged: bool = False) -> tuple[list[Battle], WorkspaceVotes]:
    """Return judge ``human``'s battles (one per rated vote of the test set) and the votes behind them."""
    found = workspace_votes(workspace, keep_flagged=keep_flagged)
    if not found.rated:
        why = f" ({len(found.left_out)} flagged voter(s) left out: --keep-flagged counts them)" \
            if found.left_out else ""
        raise ArenaError(f"{workspace} has no votes to rate{why}: collect some with `arena vote {workspace}`")
    return vote_battles(found.rated), found


def audit_with_votes(workspace: str | Path, *, judge: str | None = None, compare_judge: str | None = None,
                     human: str | Path | None = None) -> WorkspaceAudit:
    """Return ``audit_workspace``'s audit; without a label file (``human``), the workspace's votes are the labels
    (flagged voters left out), with each voter's figures and the agreement between voters."""
    found = workspace_votes(workspace) if human is None else None
    if found is None or not found.votes:
        return audit_workspace(workspace, judge=judge, compare_judge=compare_judge, human=human)
    labels = HumanLabels(f"votes in {workspace}", vote_labels(found.rated), len(found.rated), 0, [])
    result = audit_workspace(workspace, judge=judge, compare_judge=compare_judge, labels=labels)
    result.voters, result.voters_left_out = found.figures, found.left_out
    result.voter_agreement = voter_agreement(found.rated)
    with Store(workspace, readonly=True) as store:
        category = {p.id: p.category or "(none)" for p in store.get_prompts(DEFAULT_SET)}
        games = {a.judge: store.get_judgments(a.judge) for a in result.audits}
    for name, records in games.items():
        by_category: dict[str, list[HumanLabel]] = defaultdict(list)
        for lab in labels.labels:
            by_category[category.get(lab.prompt_id, "(none)")].append(lab)
        for cat in sorted(by_category):
            result.human_by_category.setdefault(cat, []).append(human_agreement(records, by_category[cat]))
        result.human_disagreements += disagreements(name, records, labels.labels, category)
    return result


def disagreements(judge: str, records: list, labels: list[HumanLabel], category: dict[str, str]) -> list[dict]:
    """Return the battles where ``judge``'s outcome differs from the people's (the majority of their votes, a
    split is a tie), most votes first: prompt, category, the two models, what each side says, votes."""
    names = {0: "first wins", 1: "second wins", 2: "tie"}
    people: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for lab in labels:
        key = battle_key(lab.prompt_id, lab.model_a, lab.model_b)
        people[key].append(oriented_code(lab.winner, lab.model_a, key))
    out = []
    for key, outcome in battle_outcomes(records).items():
        codes = people.get(key)
        if not codes:
            continue
        lo_points = sum(1.0 if c == 0 else 0.5 if c == 2 else 0.0 for c in codes)
        said = 0 if lo_points * 2 > len(codes) else 1 if lo_points * 2 < len(codes) else 2
        if said != outcome:
            out.append({"judge": judge, "prompt_id": key[0], "category": category.get(key[0], "(none)"),
                        "first": key[1], "second": key[2], "judge_says": names[outcome], "people_say": names[said],
                        "votes": len(codes)})
    return sorted(out, key=lambda d: (-d["votes"], d["prompt_id"], d["first"], d["second"]))
