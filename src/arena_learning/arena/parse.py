"""Reading a judge's verdict out of its text: strict JSON first, then tolerant fallbacks.

Judges are asked for a JSON object (and constrained to one where the engine
supports a schema), but models wrap JSON in prose or code fences, or ignore the
format. The fallbacks find the first JSON object inside the text, then
``score_a: 7``-style pairs, then MT-Bench's ``[[7]]``. A score outside 1-10 is a
parse failure, never clamped: a silent fix would change results. Label judges
(arena-hard's ``[[A>>B]]`` ... ``[[B>>A]]``, parser ``label``) are read by
:func:`parse_label`. The shared
pieces (finding JSON objects, checking a score, :class:`ParseError`) live in
:mod:`arena_learning.engines.structured`, which runs every structured rating.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..engines.structured import ParseError, bounded_score, json_objects

__all__ = ["LABELS", "ParseError", "Parsed", "label_scores", "normalize_label", "parse_label", "parse_verdict",
           "parse_yesno"]


@dataclass(frozen=True)
class Parsed:
    scores: tuple[float, ...]  # (score_a, score_b) for a pair, (score,) for a single answer
    explanation: str
    method: str  # "json", "embedded-json", "pattern", "label"
    label: str | None = None  # a label judge's verdict ("A>>B" ... "B>>A"), in the order shown


# A number that is not the start of a range such as "1-10" or "1 to 10" ...
_NUM = r"(\d+(?:\.\d+)?)(?!\s*(?:-|\u2013|to)\s*\d)"
# ... after a label's separator, which may name the scale: "Score (1-10): 7".
_SEP = r"(?:\s*\(\s*\d+\s*(?:-|\u2013|to)\s*\d+\s*\))?\W{0,4}"
_PAIR_PATTERNS = [
    re.compile(rf"score[_ ]?a{_SEP}{_NUM}.*?score[_ ]?b{_SEP}{_NUM}", re.I | re.S),
    re.compile(rf"assistant a{_SEP}{_NUM}\s*(?:/\s*10)?.*?assistant b{_SEP}{_NUM}", re.I | re.S),
    re.compile(rf"\[\[\s*{_NUM}\s*,\s*{_NUM}\s*\]\]"),
]
_SINGLE_PATTERNS = [
    re.compile(rf"\[\[\s*{_NUM}\s*\]\]"),
    re.compile(rf"\bscore{_SEP}{_NUM}", re.I),
    re.compile(rf"\brating{_SEP}{_NUM}", re.I),
]


def parse_verdict(text: str, kind: str) -> Parsed:
    """Return the scores in a judge's ``text``; ``kind`` is "pair", "single", "label" or "yesno". Raises ParseError."""
    if kind == "label":
        return parse_label(text)
    if kind == "yesno":
        return parse_yesno(text)
    keys = ("score_a", "score_b") if kind == "pair" else ("score",)
    stripped = text.strip()
    candidates = json_objects(stripped)
    errors: list[str] = []
    for n, obj in enumerate(candidates):
        if all(k in obj for k in keys):
            try:
                scores = tuple(bounded_score(obj[k], k) for k in keys)
            except ParseError as err:
                errors.append(str(err))
                continue
            method = "json" if n == 0 and stripped.startswith("{") and stripped.endswith("}") else "embedded-json"
            # a small judge's own answer (pairwise-small, single-small) is what it wrote instead of an explanation
            return Parsed(scores, str(obj.get("explanation") or obj.get("own_answer") or ""), method)
    for pattern in _PAIR_PATTERNS if kind == "pair" else _SINGLE_PATTERNS:
        m = pattern.search(stripped)
        if m:
            try:
                scores = tuple(bounded_score(g, k) for g, k in zip(m.groups(), keys))
            except ParseError as err:
                errors.append(str(err))
                continue
            return Parsed(scores, stripped, "pattern")
    detail = "; ".join(errors) if errors else f"no {' and '.join(keys)} found"
    raise ParseError(f"{detail} in judge output {stripped[:120]!r}")


# ---- a yes / no verdict (the own-reference judge: is the answer the judge's own?) --------

YES_SCORE, NO_SCORE = 10.0, 1.0
_YESNO = re.compile(r"^\W*(yes|no)\b", re.I)


def parse_yesno(text: str) -> Parsed:
    """Return a single answer's score from a verdict that starts with yes (10) or no (1). Raises ParseError.

    Only the first word counts (a small judge asked "yes or no" may go on: "Yes, both say 42."); anything else,
    "maybe" or an empty reply, is a parse failure, never a guess.
    """
    m = _YESNO.match(text)
    if not m:
        raise ParseError(f"no yes or no at the start of judge output {text.strip()[:120]!r}")
    yes = m.group(1).lower() == "yes"
    return Parsed((YES_SCORE if yes else NO_SCORE,), text.strip(), "yesno")


# ---- arena-hard's verdict labels ------------------------------------------------------------

LABELS: dict[str, int] = {"A>>B": 2, "A>B": 1, "A=B": 0, "B>A": -1, "B>>A": -2}
"""The five labels of arena-hard-auto's judge prompt (config/judge_config.yaml), as a signed
strength for assistant A: 2 significantly better ... -2 significantly worse."""

# arena-hard-auto's own pattern (judge_config.yaml ``regex_pattern``): ``\[\[([AB<>=]+)\]\]``.
_LABEL = re.compile(r"\[\[([AB<>=]+)\]\]")
# The mirrored spellings arena-hard's show_result.py also scores (``A<B`` is ``B>A``, ``B=A`` a tie).
_MIRRORED = {"A<B": "B>A", "A<<B": "B>>A", "B=A": "A=B", "B<A": "A>B", "B<<A": "A>>B"}


def normalize_label(text: str) -> str | None:
    """Return the canonical label of ``text`` (``A<B`` is ``B>A``); None if it is no label of the five."""
    label = _MIRRORED.get(text, text)
    return label if label in LABELS else None


def label_scores(label: str) -> tuple[float, float]:
    """Return (score_a, score_b) of a label: the strength of the side it favours, 0 for the other (a tie 0, 0)."""
    v = LABELS[label]
    return float(max(v, 0)), float(max(-v, 0))


def parse_label(text: str) -> Parsed:
    """Return the verdict label in a label judge's ``text`` (scores from :func:`label_scores`). Raises ParseError.

    As arena-hard-auto's ``get_score`` (gen_judgment.py): every ``[[...]]`` match counts; none is a
    failure (arena-hard asks the judge to continue), two different labels are a failure (arena-hard
    records no score). A repeated label ("... [[A>B]]. My final verdict: [[A>B]]") is one verdict.
    """
    stripped = text.strip()
    found = [_MIRRORED.get(m, m) for m in _LABEL.findall(stripped)]
    unknown = sorted({m for m in found if m not in LABELS})
    known = sorted({m for m in found if m in LABELS})
    if unknown:
        raise ParseError(f"unknown verdict label [[{unknown[0]}]] (expected one of "
                         f"{', '.join(f'[[{k}]]' for k in LABELS)}) in judge output {stripped[-120:]!r}")
    if not known:
        raise ParseError(f"no verdict label such as [[A>B]] in judge output {stripped[-120:]!r}")
    if len(known) > 1:
        raise ParseError(f"conflicting verdict labels {', '.join(f'[[{k}]]' for k in known)} in judge output "
                         f"{stripped[-120:]!r}")
    label = known[0]
    return Parsed(label_scores(label), stripped, "label", label)
