"""The built-in task suite: seeded prompts with reference answers and checkers.

Each category is one that a small base model partly solves and partly fails,
so a verifier judge can separate contestants without an LLM judge. A prompt
carries its category, its reference answer and the name of its checker; a
checker maps an answer to a score 0-10 (10 right, partial credit where an
answer is close or right but buried in other text, 0 wrong).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

from ..errors import ConfigError
from ..records import Prompt
from . import world
from .checks import (
    CHECKERS,
    check,
    check_date,
    check_exact,
    check_list,
    check_numeric,
    check_text,
    check_turns,
    check_word,
)

__all__ = [
    "CATEGORIES",
    "CHECKERS",
    "SUITES",
    "SuiteTooSmall",
    "check",
    "check_date",
    "check_exact",
    "check_list",
    "check_numeric",
    "check_text",
    "check_turns",
    "check_word",
    "generate_tasks",
    "suite_categories",
]

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Canada": "Ottawa", "Australia": "Canberra",
    "Brazil": "Brasilia", "Argentina": "Buenos Aires", "Mexico": "Mexico City", "India": "New Delhi",
    "Kenya": "Nairobi", "Greece": "Athens", "Portugal": "Lisbon", "Norway": "Oslo", "Sweden": "Stockholm",
    "Finland": "Helsinki", "Poland": "Warsaw", "Austria": "Vienna", "Ireland": "Dublin", "Peru": "Lima",
    "Chile": "Santiago", "Turkey": "Ankara", "Thailand": "Bangkok", "Vietnam": "Hanoi", "Cuba": "Havana",
    "Hungary": "Budapest", "Denmark": "Copenhagen", "Belgium": "Brussels", "Netherlands": "Amsterdam",
    "Switzerland": "Bern", "South Korea": "Seoul", "Iran": "Tehran", "Iraq": "Baghdad", "Nigeria": "Abuja",
    "Morocco": "Rabat", "Colombia": "Bogota",
    "Venezuela": "Caracas", "Ecuador": "Quito", "Bolivia": "Sucre", "Uruguay": "Montevideo",
    "Paraguay": "Asuncion", "Jamaica": "Kingston", "Iceland": "Reykjavik", "Czechia": "Prague",
    "Slovakia": "Bratislava", "Romania": "Bucharest", "Bulgaria": "Sofia", "Serbia": "Belgrade",
    "Croatia": "Zagreb", "Ukraine": "Kyiv", "Estonia": "Tallinn", "Latvia": "Riga", "Lithuania": "Vilnius",
    "Saudi Arabia": "Riyadh", "Israel": "Jerusalem", "Jordan": "Amman", "Lebanon": "Beirut", "Syria": "Damascus",
    "Pakistan": "Islamabad", "Afghanistan": "Kabul", "Nepal": "Kathmandu", "Bangladesh": "Dhaka",
    "Indonesia": "Jakarta", "Malaysia": "Kuala Lumpur", "Philippines": "Manila", "Singapore": "Singapore",
    "Mongolia": "Ulaanbaatar", "New Zealand": "Wellington", "Ethiopia": "Addis Ababa", "Ghana": "Accra",
    "Senegal": "Dakar", "Tunisia": "Tunis", "Algeria": "Algiers", "Uganda": "Kampala", "Tanzania": "Dodoma",
    "Zimbabwe": "Harare",
}
WORDS = [
    "apple", "banana", "cherry", "garden", "rocket", "silver", "planet", "window", "yellow", "market",
    "pencil", "castle", "dragon", "forest", "guitar", "harbor", "island", "jungle", "kitten", "ladder",
    "mirror", "number", "orange", "pepper", "rabbit", "summer", "tomato", "violet", "winter", "zebra",
    "letter", "butter", "coffee", "moon", "sun", "tree", "river", "cloud", "stone", "bridge",
]
UNITS = [
    ("meters", "centimeters", 100), ("kilometers", "meters", 1000), ("hours", "minutes", 60),
    ("minutes", "seconds", 60), ("kilograms", "grams", 1000), ("days", "hours", 24),
    ("feet", "inches", 12), ("weeks", "days", 7), ("liters", "milliliters", 1000), ("dollars", "cents", 100),
]
CATEGORIES = [
    "arithmetic", "capitals", "letter_case", "counting", "comparison",
    "unit_conversion", "sorting", "sequence", "reverse",
]

# ---- generators: rng -> (question, reference, checker, meta) ---------------------


def _arithmetic(rng: random.Random) -> tuple[str, str, str, dict]:
    digits = rng.choice([1, 1, 2, 2, 3, 4])
    op = rng.choice(["+", "-", "*"] if digits <= 2 else ["+", "-"])
    a, b = rng.randint(10 ** (digits - 1), 10**digits - 1), rng.randint(10 ** (digits - 1), 10**digits - 1)
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return f"What is {a} {op} {b}?", str(value), "numeric", {"closeness": True, "digits": digits}


def _capitals(rng: random.Random) -> tuple[str, str, str, dict]:
    country = rng.choice(sorted(CAPITALS))
    return f"What is the capital of {country}?", CAPITALS[country], "text", {}


def _letter_case(rng: random.Random) -> tuple[str, str, str, dict]:
    word = rng.choice(WORDS)
    if rng.random() < 0.5:
        return f"Write the word '{word}' in uppercase letters.", word.upper(), "exact", {}
    mixed = "".join(c.upper() if rng.random() < 0.5 else c for c in word)
    return f"Write the word '{mixed}' in lowercase letters.", word, "exact", {}


def _counting(rng: random.Random) -> tuple[str, str, str, dict]:
    word = rng.choice(WORDS)
    if rng.random() < 0.5:
        return f"How many letters are in the word '{word}'?", str(len(word)), "numeric", {}
    letter = rng.choice(sorted(set(word)))
    return f"How many times does the letter '{letter}' appear in '{word}'?", str(word.count(letter)), "numeric", {}


def _comparison(rng: random.Random) -> tuple[str, str, str, dict]:
    a, b = rng.sample(range(1, 1000), 2)
    if rng.random() < 0.5:
        return f"Which number is larger, {a} or {b}?", str(max(a, b)), "numeric", {}
    return f"Which number is smaller, {a} or {b}?", str(min(a, b)), "numeric", {}


def _unit_conversion(rng: random.Random) -> tuple[str, str, str, dict]:
    big, small, factor = rng.choice(UNITS)
    n = rng.randint(1, 12)
    return f"How many {small} are in {n} {big}?", str(n * factor), "numeric", {}


def _sorting(rng: random.Random) -> tuple[str, str, str, dict]:
    nums = rng.sample(range(1, 100), rng.choice([3, 4, 5]))
    ref = ",".join(str(n) for n in sorted(nums))
    shown = ", ".join(str(n) for n in nums)
    return f"Sort these numbers from smallest to largest: {shown}.", ref, "list", {}


def _sequence(rng: random.Random) -> tuple[str, str, str, dict]:
    kind = rng.choice(["add", "add", "mul"])
    start = rng.randint(1, 20)
    if kind == "add":
        step = rng.randint(1, 12)
        seq = [start + step * i for i in range(5)]
    else:
        step = rng.choice([2, 3])
        seq = [start * step**i for i in range(5)]
    shown = ", ".join(str(x) for x in seq[:4])
    return f"What number comes next in the sequence {shown}, ...?", str(seq[4]), "numeric", {}


def _reverse(rng: random.Random) -> tuple[str, str, str, dict]:
    word = rng.choice(WORDS)
    return f"Spell the word '{word}' backwards.", word[::-1], "exact", {}


GENERATORS: dict[str, Callable[[random.Random], tuple[str, str, str, dict]]] = {
    "arithmetic": _arithmetic,
    "capitals": _capitals,
    "letter_case": _letter_case,
    "counting": _counting,
    "comparison": _comparison,
    "unit_conversion": _unit_conversion,
    "sorting": _sorting,
    "sequence": _sequence,
    "reverse": _reverse,
}


class SuiteTooSmall(ConfigError, ValueError):
    """More distinct prompts asked of the suite (or of some categories) than it can make."""


SUITES: dict[int, list[str]] = {1: CATEGORIES, 2: world.CATEGORIES}
"""Each version of the suite and its categories (version 1: this module; version 2: ``world.py``)."""


def suite_categories(suite: int) -> list[str]:
    """Return the categories of suite version ``suite``; an unknown version is a ConfigError."""
    if suite not in SUITES:
        raise ConfigError(f"tasks.suite {suite} is not a version of the built-in task suite: give one of "
                          f"{', '.join(map(str, SUITES))}")
    return SUITES[suite]


def _make(suite: int, cat: str, rng: random.Random, slot: int) -> tuple[str, str, str, dict]:
    if suite == 1:
        return GENERATORS[cat](rng)
    return world.GENERATORS[cat](rng, slot)


def generate_tasks(n: int, seed: int = 0, categories: list[str] | None = None,
                   exclude: set[str] | frozenset[str] = frozenset(), suite: int = 1) -> list[Prompt]:
    """Return ``n`` distinct task prompts spread evenly over ``categories`` (all of the suite's by default).

    The same (n, seed, categories, exclude, suite) always gives the same prompts; ids are a
    hash of the question, so a prompt keeps its id whatever else is generated.
    ``exclude``: questions never to generate (compared without case and surrounding space),
    e.g. the few-shot examples of the contestants' prompt formats: a model shown the answer
    in its prompt must not be tested on it.
    ``suite``: 1, the original nine categories (the default, so that workspaces made with it
    stay what they were), or 2, the balanced world of ``world.py``.
    """
    known = suite_categories(suite)
    cats = list(categories or known)
    unknown = [c for c in cats if c not in known]
    if unknown:
        raise ValueError(f"unknown task categories {unknown} in suite {suite}; known: {', '.join(known)}")
    rng = random.Random(seed)
    banned = {q.strip().lower() for q in exclude}
    seen: set[str] = set()
    out: list[Prompt] = []
    made = dict.fromkeys(cats, 0)
    attempts = 0
    source = "builtin-tasks" if suite == 1 else f"builtin-tasks-v{suite}"
    while len(out) < n:
        cat = cats[len(out) % len(cats)]
        question, ref, checker, meta = _make(suite, cat, rng, made[cat])
        attempts += 1
        if attempts > 50 * n + 1000:
            raise SuiteTooSmall(f"the built-in task suite cannot make {n} distinct prompts from categories "
                                f"{', '.join(cats)} (it made {len(out)}): set tasks.n lower, or use open prompts "
                                f"(prompts: set or path) for a larger test set")
        if question in seen or question.strip().lower() in banned:
            continue
        seen.add(question)
        made[cat] += 1
        pid = "task-" + hashlib.sha1(question.encode()).hexdigest()[:12]
        out.append(
            Prompt(id=pid, turns=[question], source=source, category=cat,
                   reference=[ref], checker=checker, meta=meta)
        )
    return out
