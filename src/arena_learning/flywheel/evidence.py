"""The evidence of the last evaluation: paired deltas, exact answers and verbosity of every model rated.

Each stage's and round's model is compared with the model it started from, the untrained base and
the best reference by ``rating.paired``: the difference of their ratings in each bootstrap round of
the very fit the round table's ratings come from (the test prompts resampled once per round, every
model rated on it), with its 95% CI; and by exact answers (checker score 10), gained and lost per
category. Verbosity, the pitfall of iterative DPO: each model's mean answer length and its rating
with answer style controlled (``rating.style``), beside the plain one.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArenaError
from ..flywheel_state import Delta
from ..rating.bt import BTResult, RateOptions, RatingWarning, rate
from ..rating.counts import BattleTable
from ..rating.paired import exact_answers, exact_count, paired_delta
from ..rating.style import style_control, style_features
from ..records import Answer, Battle, ExactAnswers, Prompt, Rating
from ..tasks.shortcuts import follows_shortcut


def _r2(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


@dataclass
class Evidence:
    """The last evaluation's fit and what was measured of each model on the test set."""

    fit: BTResult
    correct: dict[str, dict[str, bool]]
    categories: dict[str, str | None]
    chars: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, float | None] = field(default_factory=dict)
    style: dict[str, Rating] = field(default_factory=dict)
    style_note: str = ""
    shortcuts: dict[str, list[str]] = field(default_factory=dict)

    def delta(self, model: str, other: str | None) -> Delta | None:
        """Return ``model`` minus ``other`` (paired), or None when either is not rated or they are one model."""
        if other is None or model == other or model not in self.fit.models or other not in self.fit.models:
            return None
        d = paired_delta(self.fit, model, other)
        return Delta(vs=other, rating=round(d.rating, 2), ci_low=_r2(d.ci_low), ci_high=_r2(d.ci_high),
                     p_better=None if d.p_better is None else round(d.p_better, 3))

    def exact(self, model: str, other: str | None) -> ExactAnswers | None:
        """Return ``model``'s exact answers, gained and lost against ``other`` (if it was checked too)."""
        if other == model or other not in self.correct:
            other = None
        return exact_count(self.correct, self.categories, model, other)

    def measured(self, model: str) -> dict[str, Any]:
        """Return the verbosity and shortcut fields of ``Measured`` for ``model``."""
        s = self.style.get(model)
        return {"shortcuts": self.shortcuts.get(model) if self.correct.get(model) else None,
                "mean_chars": _r2(self.chars.get(model)), "mean_tokens": _r2(self.tokens.get(model)),
                "style_rating": None if s is None else round(s.rating, 2),
                "style_ci_low": None if s is None else _r2(s.ci_low),
                "style_ci_high": None if s is None else _r2(s.ci_high)}


def gather(battles: Sequence[Battle], answers: Sequence[Answer], prompts: Sequence[Prompt],
           options: RateOptions) -> Evidence:
    """Return the evidence of ``battles`` (the test set's, rated with ``options``) and the test set's ``answers``.

    The fit is ``bt.rate`` with the leaderboard's options, so its ratings are the round table's to the digit.
    """
    fit = rate(BattleTable.from_battles(battles), options)
    ids = {p.id for p in prompts}
    mine = [a for a in answers if a.prompt_id in ids]
    chars: dict[str, list[int]] = {}
    tokens: dict[str, list[int]] = {}
    for a in mine:
        chars.setdefault(a.model, []).append(sum(len(t) for t in a.turns))
        tokens.setdefault(a.model, []).append(a.tokens_out)
    ev = Evidence(fit=fit, correct=exact_answers(prompts, mine), categories={p.id: p.category for p in prompts},
                  chars={m: sum(v) / len(v) for m, v in chars.items()},
                  tokens={m: (sum(v) / len(v) if any(v) else None) for m, v in tokens.items()})
    checked = [p for p in prompts if p.checker is not None and p.reference]
    for model in {a.model for a in mine}:
        firsts = {a.prompt_id: a.turns[0] for a in mine if a.model == model and a.turns}
        ev.shortcuts[model] = [f"{s.category}: {s.policy} (agrees on {s.agreement:.0%}, exact {s.exact:.0%}, the "
                               f"rule's {s.policy_exact:.0%})" for s in follows_shortcut(checked, firsts)]
    text = {(a.prompt_id, a.model): "\n\n".join(a.turns) for a in mine}
    try:
        with warnings.catch_warnings():
            # the plain fit above has warned whatever the data lacks; the style fit would only repeat it
            warnings.simplefilter("ignore", RatingWarning)
            styled = style_control(battles, style_features([text.get((b.prompt_id, b.model_a), "") for b in battles]),
                                   style_features([text.get((b.prompt_id, b.model_b), "") for b in battles]), options)
        ev.style = {r.model: r for r in styled.controlled.to_ratings()}
    except ArenaError as err:  # e.g. answers that never differ in style: no style column, the rest stands
        ev.style_note = str(err)
    return ev
