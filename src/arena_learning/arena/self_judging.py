"""A judge never grades itself: a judge whose model is a contestant's is refused; one of the same family
is warned about, with its own family's win rate against the others (self-preference: GPT-4 judging its
own answers wins 87.2% in the MT-Bench paper's data).

Identity is what answers: an endpoint's model name at the same address (any of its ``base_url``s), or
the same local weights (the resolved file or folder of an in-process engine). A family is the model's
``family:`` when set, else its name stem: the first word of the model's last path component, without
an organisation word (``meta``) and without its digits (``Meta-Llama-3-70B-Instruct`` and
``Meta-Llama-3-8B-Instruct`` are both ``llama``; ``gpt-4-turbo`` and ``gpt4_1106_preview`` both ``gpt``).
An imported contestant (answers loaded from files) has no identity, only a family.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..config import JudgeConfig, ModelSpec
from ..errors import ArenaError
from ..records import Battle

ORGANISATION_WORDS = {"meta", "hf", "models", "model", "the"}
"""Words a model name may start with that say who made or holds it, not what it is."""


class SelfPreferenceWarning(UserWarning):
    """The judge shares a family with contestants: their win rate against the others is reported."""


@dataclass(frozen=True)
class Identity:
    """What answers for a model: ``kind`` 'endpoint' (``urls``, ``model``) or 'weights' (``model``: the path)."""

    kind: str
    model: str
    urls: frozenset[str] = frozenset()

    def same(self, other: Identity) -> bool:
        if self.kind != other.kind or self.model != other.model:
            return False
        return self.kind == "weights" or bool(self.urls & other.urls)

    def describe(self, other: Identity) -> str:
        if self.kind == "weights":
            return f"the same weights ({self.model})"
        return f"the same endpoint model ({self.model!r} at {', '.join(sorted(self.urls & other.urls))})"


def identity(spec: ModelSpec) -> Identity | None:
    """Return what answers for ``spec`` (None: an imported model, which nothing runs)."""
    kind = spec.engine_kind
    if not kind.makes_calls:
        return None
    if spec.base_urls:
        return Identity("endpoint", spec.model, frozenset(u.rstrip("/").lower() for u in spec.base_urls))
    try:
        path = kind.weights_path(spec.model)
    except (ArenaError, OSError, ValueError):
        path = None  # weights that cannot be found here: compare by what the config says
    if path is None:
        return Identity("weights", spec.model)
    from ..engines.identity import content_identity

    try:  # the same weights under another name or path are the same model
        return Identity("weights", content_identity(path)[:23])
    except OSError:
        return Identity("weights", str(path.resolve()))


def family(spec: ModelSpec) -> str:
    """Return ``spec``'s family: its ``family`` setting, else the stem of its model's (or its) name."""
    if spec.family:
        return spec.family.lower()
    name = spec.model if spec.engine_kind.makes_calls and spec.model else spec.name
    return stem(name)


def stem(name: str) -> str:
    """Return the name stem of a model name (module docstring)."""
    last = re.split(r"[/\\]", name.strip().rstrip("/\\"))[-1].lower()
    words = [w for w in re.split(r"[-_.:\s]+", last) if w]
    while len(words) > 1 and words[0] in ORGANISATION_WORDS:
        words = words[1:]
    if not words:
        return last
    letters = re.match(r"[a-z]+", words[0])
    return letters.group(0) if letters else words[0]


def judge_models(judge: JudgeConfig) -> list[tuple[str, ModelSpec]]:
    """Return (judge name, its model) of an LLM judge, or of every LLM member of a panel."""
    if judge.kind == "llm" and judge.model is not None:
        return [(judge.name, judge.model)]
    return [pair for member in judge.members for pair in judge_models(member)]


def check_self_judging(judge: JudgeConfig, models: Sequence[ModelSpec], *, allow: bool = False
                       ) -> dict[str, list[str]]:
    """Refuse a judge whose model is a contestant's (ArenaError naming both and why; with ``allow``, a warning
    instead); return judge name -> the contestants of its family (the ones its self-preference is measured on)."""
    kin: dict[str, list[str]] = {}
    for name, spec in judge_models(judge):
        mine = identity(spec)
        for m in models:
            other = identity(m)
            if mine is not None and other is not None and mine.same(other):
                what = f"judge {name!r} grades itself: its model and contestant {m.name!r} are {mine.describe(other)}"
                if not allow:
                    raise ArenaError(f"{what}. A judge never grades its own answers (self-preference); judge with "
                                     "another model, leave that contestant out, or set audit.allow_self_judging "
                                     "(one model only on this machine)")
                warnings.warn(f"{what} (allowed by audit.allow_self_judging): its verdicts on {m.name!r} are "
                              "self-judged", SelfPreferenceWarning, stacklevel=2)
            if family(m) == family(spec):
                kin.setdefault(name, []).append(m.name)
    return kin


@dataclass
class SelfPreference:
    """A judge's own family against the others: the family's points (ties half) over ``battles``."""

    judge: str
    family: str
    models: list[str]
    battles: int
    win_rate: float | None  # percent; None: no battle between the family and the others


def self_preference(judge: str, fam: str, kin: Iterable[str], battles: Sequence[Battle]) -> SelfPreference:
    """Return the win rate of the models in ``kin`` against every other model in ``battles``."""
    kin = set(kin)
    points = n = 0.0
    for b in battles:
        a_in, b_in = b.model_a in kin, b.model_b in kin
        if a_in == b_in:
            continue
        won = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}[b.outcome]
        points += (won if a_in else 1.0 - won) * b.weight
        n += b.weight
    return SelfPreference(judge=judge, family=fam, models=sorted(kin), battles=int(n),
                          win_rate=100.0 * points / n if n else None)


def warn_self_preference(judge: JudgeConfig, kin: dict[str, list[str]], battles: Sequence[Battle]
                         ) -> list[SelfPreference]:
    """Warn, for each judge with family members among the contestants, with their win rate against the rest."""
    out = []
    specs = dict(judge_models(judge))
    for name, members in kin.items():
        sp = self_preference(name, family(specs[name]), members, battles)
        out.append(sp)
        rate = f"{sp.win_rate:.1f}% of {sp.battles} battles" if sp.win_rate is not None else "no battle yet"
        warnings.warn(f"judge {name!r} is of the {sp.family!r} family, as {', '.join(sp.models)}: judges tend "
                      f"to prefer their own family's answers; against the other models they won {rate} "
                      f"(compare with their ratings' prediction, or judge with a model of another family)",
                      SelfPreferenceWarning, stacklevel=2)
    return out
