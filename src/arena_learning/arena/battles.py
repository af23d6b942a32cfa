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


def combine_games(judgments: Sequence[Judgment], tie_threshold: float = 0.0) -> list[Battle]:
    """Return one Battle per (prompt, pair, judge) from its games (one per order shown).

    Scores are averaged over the games with each score credited to its model,
    whichever position it was shown in; failed games are left out.
    """
    groups: dict[tuple[str, str, str, str], list[Judgment]] = defaultdict(list)
    for j in judgments:
        if j.status != "ok" or j.score_a is None or j.score_b is None:
            continue
        first, second = sorted((j.model_a, j.model_b))
        groups[(j.prompt_id, first, second, j.judge)].append(j)
    battles = []
    for (pid, first, second, judge), games in groups.items():
        # Keep the order of the first game, so a one-game battle reads as its judgment.
        a, b = games[0].model_a, games[0].model_b
        sa = [g.score_a if g.model_a == a else g.score_b for g in games]
        sb = [g.score_b if g.model_a == a else g.score_a for g in games]
        mean_a, mean_b = sum(sa) / len(sa), sum(sb) / len(sb)  # type: ignore[arg-type]
        battles.append(
            Battle(
                prompt_id=pid,
                model_a=a,
                model_b=b,
                outcome=verdict(mean_a, mean_b, tie_threshold),
                score_a=mean_a,
                score_b=mean_b,
                score_gap=abs(mean_a - mean_b),
                judge=judge,
                games=len(games),
            )
        )
    return battles
