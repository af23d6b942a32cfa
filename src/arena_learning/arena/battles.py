"""Battles: judge every scheduled pair on every prompt, and combine games into battles."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..records import Answer, Battle, Judgment, Prompt
from .judges import PairTask, verdict


@dataclass
class BattlePlan:
    tasks: list[PairTask]
    missing: dict[str, int] = field(default_factory=dict)  # model -> prompts it has no answer for


def plan_battles(
    prompts: Sequence[Prompt], answers: Sequence[Answer], pairs: Sequence[tuple[str, str]]
) -> BattlePlan:
    """Return the games to judge: each pair on each prompt both models answered."""
    by_key = {(a.prompt_id, a.model): a for a in answers}
    missing: dict[str, int] = defaultdict(int)
    tasks: list[PairTask] = []
    for p in prompts:
        for a, b in pairs:
            ans_a, ans_b = by_key.get((p.id, a)), by_key.get((p.id, b))
            if ans_a is None:
                missing[a] += 1
            if ans_b is None:
                missing[b] += 1
            if ans_a is not None and ans_b is not None:
                tasks.append(PairTask(p, ans_a, ans_b))
    return BattlePlan(tasks=tasks, missing=dict(missing))


def _winner(j: Judgment) -> str | None:
    """Return the name of the model a game's verdict favours (None for a tie)."""
    return j.model_a if j.verdict == "model_a" else j.model_b if j.verdict == "model_b" else None


def _strong(j: Judgment) -> bool:
    """Return whether a label judge's game says one side is significantly better on every turn ([[A>>B]])."""
    return bool(j.labels) and all(">>" in label for label in j.labels) and len({*j.labels}) == 1


def combine_games(judgments: Sequence[Judgment], tie_threshold: float = 0.0, mode: str = "mean",
                  strong_weight: int = 1) -> list[Battle]:
    """Return the battles of the judgments' games; failed games are left out.

    ``mode`` says how the games of one (prompt, pair, judge) combine:
    ``mean``: one battle from each model's score averaged over the games,
    whichever position it was shown in; ``both``: every game is a battle of its
    own (the bootstrap should then resample prompts); ``consistent``: one
    battle, a tie unless every game names the same winner.

    ``strong_weight``: in ``both`` mode, a label judge's game with a strong verdict
    (``[[A>>B]]``, ``[[B>>A]]``) is a battle of that weight, as arena-hard-auto's
    show_result.py counts it (3 there: the verdict repeated three times).
    """
    groups: dict[tuple[str, str, str, str], list[Judgment]] = defaultdict(list)
    for j in judgments:
        if j.status != "ok" or j.score_a is None or j.score_b is None:
            continue
        first, second = sorted((j.model_a, j.model_b))
        groups[(j.prompt_id, first, second, j.judge)].append(j)
    battles = []
    for (pid, _, _, judge), games in groups.items():
        if mode == "both":
            for g in games:
                gap = abs(g.score_a - g.score_b)  # type: ignore[operator]  # groups hold scored games only
                battles.append(Battle(prompt_id=pid, model_a=g.model_a, model_b=g.model_b, outcome=g.verdict or "tie",
                                      score_a=g.score_a, score_b=g.score_b, score_gap=gap, judge=judge, games=1,
                                      weight=strong_weight if _strong(g) else 1))
            continue
        # Keep the order of the first game, so a one-game battle reads as its judgment.
        a, b = games[0].model_a, games[0].model_b
        sa = [g.score_a if g.model_a == a else g.score_b for g in games]
        sb = [g.score_b if g.model_a == a else g.score_a for g in games]
        mean_a, mean_b = sum(sa) / len(sa), sum(sb) / len(sb)  # type: ignore[arg-type]  # scored games only
        if mode == "consistent":
            winners = {_winner(g) for g in games}
            only = winners.pop() if len(winners) == 1 else None
            outcome = "tie" if only is None else ("model_a" if only == a else "model_b")
        else:
            outcome = verdict(mean_a, mean_b, tie_threshold)
        battles.append(
            Battle(prompt_id=pid, model_a=a, model_b=b, outcome=outcome, score_a=mean_a, score_b=mean_b,
                   score_gap=abs(mean_a - mean_b), judge=judge, games=len(games))
        )
    return battles
