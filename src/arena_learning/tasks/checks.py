"""The task suite's checkers: an answer, its reference and the prompt's meta -> a score 0-10.

Shared by every suite version (``suite.py``: version 1, ``world.py``: version 2). Each checker reads
the answer's first non-empty line: 10 for the reference, partial credit where an answer is close
or right but buried in other text, 0 wrong.

Partial credit is only for what an answer adds to the question: it is never paid for the question
given back (an echo: the word to uppercase written as shown, the list as shown, an operand as the
sum), for a number the question holds (both numbers of a comparison, listed, are a hedge, not a
near miss), for a list in the opposite order, or for a first line that names every option ("yes or
no"). These are surface policies (``shortcuts.py``): each scores at its category's chance level, on
partial credit as on exact answers (found in stop 30: DPO on the flywheel's world won 7 battles by
echoing the question for 5 points).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..records import Prompt

CHECKS_VERSION = 2
"""Bumped when a checker scores some answer differently (2: no partial credit for an echo or a hedge,
stop 31); a flywheel stage harvested or rewarded under another version is redone."""

_NUM = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def _numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUM.findall(text)]


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _words(text: str) -> str:
    """``text`` lowercased, quotes and a final period dropped, spaces collapsed: how an echo is compared."""
    return " ".join(text.lower().replace("'", " ").replace('"', " ").replace("`", " ").split()).rstrip(".").strip()


def is_echo(answer: str, question: str) -> bool:
    """Whether the answer's first line is the question or a run of its words (case, quotes, final period ignored)."""
    got, asked = _words(_first_line(answer)), _words(question)
    return bool(got) and re.search(rf"(?<![a-z0-9]){re.escape(got)}(?![a-z0-9])", asked) is not None


def _norm(text: str) -> str:
    text = text.lower().strip()
    text = re.sub(r"^(the answer is|answer:|it is|it's)\s*", "", text)
    return re.sub(r"[^a-z0-9 ]+", "", text).strip()


# ---- checkers: (answer, reference, prompt meta) -> score 0-10 --------------------


def check_numeric(answer: str, reference: str, meta: dict, question: str = "") -> float:
    """10 if the first number of the answer's first line equals the reference; partial credit if close or buried.

    A number the question holds earns no partial credit: an operand is not a near miss, and the right
    number of a comparison listed beside the other is a hedge.
    """
    target = float(reference)
    first = _numbers(_first_line(answer))
    given = _numbers(question)
    if first:
        got = first[0]
        if abs(got - target) <= 1e-9 + 1e-6 * abs(target):
            return 10.0
        if meta.get("closeness") and target != 0 and got not in given:
            rel = abs(got - target) / abs(target)
            if rel <= 0.01:
                return 7.0
            if rel <= 0.1:
                return 3.0
    # Right number present but not the answer given first: a hedge, worth a little (not one the question gave).
    if target not in given and any(abs(n - target) <= 1e-9 + 1e-6 * abs(target) for n in _numbers(answer)):
        return 3.0
    return 0.0


_OPPOSITE = {"yes": "no", "no": "yes"}


def check_text(answer: str, reference: str, meta: dict, question: str = "") -> float:
    """10 for the reference (normalised case and punctuation), 6 if it is a word of the first line.

    A first line that holds a yes/no reference's opposite too ("yes or no") names every option: 0.
    """
    got = _norm(_first_line(answer))
    ref = _norm(reference)
    if got == ref:
        return 10.0
    other = _OPPOSITE.get(ref)
    if other is not None and re.search(rf"\b{other}\b", got):
        return 0.0
    if ref and re.search(rf"\b{re.escape(ref)}\b", got):
        return 6.0
    return 0.0


def _exact_first(answer: str, reference: str) -> float | None:
    """10 if the first line is the reference (quotes and final period ignored), 5 if right but for case."""
    got = _first_line(answer).strip().strip("\"'`").rstrip(".").strip("\"'`")
    if got == reference:
        return 10.0
    if got.lower() == reference.lower():
        return 5.0
    return None


def check_exact(answer: str, reference: str, meta: dict, question: str = "") -> float:
    """10 for exactly the reference (quotes and final period ignored), 5 if right but for case."""
    first = _exact_first(answer, reference)
    if first is not None:
        return first
    return 4.0 if reference in answer else 0.0


def check_list(answer: str, reference: str, meta: dict, question: str = "") -> float:
    """10 for the sorted list; otherwise credit for the positions right beyond those the question's order has.

    The same numbers are needed; the list in the opposite order earns nothing (a direction-blind sort),
    nor the list as shown: credit is 8 x (positions right - the shown order's) / (positions the shown
    order has wrong), at least 0 (0 when the question shows the list sorted). Without the question, the shown
    order counts no position right.
    """
    want = [float(x) for x in reference.split(",")]
    got = _numbers(_first_line(answer))[: len(want) + 2]
    if got == want:
        return 10.0
    if sorted(got) != sorted(want) or got == want[::-1]:
        return 0.0
    shown = _numbers(question)[-len(want):]
    had = sum(1 for a, b in zip(shown, want) if a == b) if sorted(shown) == sorted(want) else 0
    if had == len(want):  # the question showed the list sorted (suite 1 does, now and then): nothing to add
        return 0.0
    right = sum(1 for a, b in zip(got, want) if a == b)
    return round(8.0 * max(0, right - had) / (len(want) - had), 2)


def check_word(answer: str, reference: str, meta: dict, question: str = "") -> float:
    """As ``check_exact``, but the 4 for a buried answer needs it as a whole word (a letter in a word is no answer)."""
    first = _exact_first(answer, reference)
    if first is not None:
        return first
    return 4.0 if re.search(rf"(?<![A-Za-z0-9]){re.escape(reference)}(?![A-Za-z0-9])", answer) else 0.0


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
_DATE = re.compile(r"\b(" + "|".join(MONTHS) + r")\s+(\d{1,2})(?:st|nd|rd|th)?\b", re.IGNORECASE)


def check_date(answer: str, reference: str, meta: dict, question: str = "") -> float:
    """10 if the first line's first "Month day" is the reference's (a year after it is ignored), 3 if buried."""
    want = _DATE.search(reference)
    if want is None:
        raise ValueError(f"date reference {reference!r} is not 'Month day'")
    key = (want.group(1).lower(), int(want.group(2)))
    first = _DATE.search(_first_line(answer))
    if first is not None and (first.group(1).lower(), int(first.group(2))) == key:
        return 10.0
    if any((m.group(1).lower(), int(m.group(2))) == key for m in _DATE.finditer(answer)):
        return 3.0
    return 0.0


CHECKERS: dict[str, Callable[[str, str, dict, str], float]] = {
    "numeric": check_numeric,
    "text": check_text,
    "exact": check_exact,
    "list": check_list,
    "date": check_date,
    "word": check_word,
}


def check_turns(prompt: Prompt, answers: list[str]) -> list[float]:
    """Return the checker score 0-10 of each turn's answer (a missing answer scores 0).

    Each checker sees its turn's question; partial credit for an answer that gives the question back
    (``is_echo``) is 0 whatever the checker found.
    """
    if prompt.checker is None or not prompt.reference:
        raise ValueError(
            f"prompt {prompt.id} has no reference answer: the verifier judge scores only prompts "
            f"with references (the built-in task suite); use an LLM judge for open prompts"
        )
    fn = CHECKERS[prompt.checker]
    out = []
    for i, ref in enumerate(prompt.reference):
        answer = answers[i] if i < len(answers) else ""
        question = prompt.turns[i] if i < len(prompt.turns) else ""
        score = fn(answer, ref, prompt.meta, question)
        out.append(0.0 if 0 < score < 10 and is_echo(answer, question) else score)
    return out


def check(prompt: Prompt, answers: list[str]) -> float:
    """Return the mean checker score 0-10 over the prompt's turns."""
    scores = check_turns(prompt, answers)
    return sum(scores) / len(scores)


