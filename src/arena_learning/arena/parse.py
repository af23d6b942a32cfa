"""Reading a judge's verdict out of its text: strict JSON first, then tolerant fallbacks.

Judges are asked for a JSON object (and constrained to one where the engine
supports a schema), but models wrap JSON in prose or code fences, or ignore the
format. The fallbacks find the first JSON object inside the text, then
``score_a: 7``-style pairs, then MT-Bench's ``[[7]]``. A score outside 1-10 is a
parse failure, never clamped: a silent fix would change results. The shared
pieces (finding JSON objects, checking a score, :class:`ParseError`) live in
:mod:`arena_learning.engines.structured`, which runs every structured rating.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..engines.structured import ParseError, bounded_score, json_objects

__all__ = ["ParseError", "Parsed", "parse_verdict"]


@dataclass(frozen=True)
class Parsed:
    scores: tuple[float, ...]  # (score_a, score_b) for a pair, (score,) for a single answer
    explanation: str
    method: str  # "json", "embedded-json", "pattern"


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
    """Return the scores in a judge's ``text``; ``kind`` is "pair" or "single". Raises ParseError."""
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
            return Parsed(scores, str(obj.get("explanation", "")), method)
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
