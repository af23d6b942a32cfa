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
import re
from collections.abc import Callable

from ..errors import ConfigError
from ..records import Prompt

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

_NUM = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def _numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUM.findall(text)]


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _norm(text: str) -> str:
    text = text.lower().strip()
    text = re.sub(r"^(the answer is|answer:|it is|it's)\s*", "", text)
    return re.sub(r"[^a-z0-9 ]+", "", text).strip()


# ---- checkers: (answer, reference, prompt meta) -> score 0-10 --------------------


def check_numeric(answer: str, reference: str, meta: dict) -> float:
    """10 if the first number of the answer's first line equals the reference; partial credit if close or buried."""
    target = float(reference)
    first = _numbers(_first_line(answer))
    if first:
        got = first[0]
        if abs(got - target) <= 1e-9 + 1e-6 * abs(target):
            return 10.0
        if meta.get("closeness") and target != 0:
            rel = abs(got - target) / abs(target)
            if rel <= 0.01:
                return 7.0
            if rel <= 0.1:
                return 3.0
    # Right number present but not the answer given first: a hedge, worth a little.
    if any(abs(n - target) <= 1e-9 + 1e-6 * abs(target) for n in _numbers(answer)):
        return 3.0
    return 0.0


def check_text(answer: str, reference: str, meta: dict) -> float:
    """10 for the reference (normalised case and punctuation), 6 if it is a word of the first line."""
    got = _norm(_first_line(answer))
    ref = _norm(reference)
    if got == ref:
        return 10.0
    if ref and re.search(rf"\b{re.escape(ref)}\b", got):
        return 6.0
    return 0.0


def check_exact(answer: str, reference: str, meta: dict) -> float:
    """10 for exactly the reference (quotes and final period ignored), 5 if right but for case."""
    got = _first_line(answer).strip().strip("\"'`").rstrip(".").strip("\"'`")
    if got == reference:
        return 10.0
    if got.lower() == reference.lower():
        return 5.0
    if reference in answer:
        return 4.0
    return 0.0


def check_list(answer: str, reference: str, meta: dict) -> float:
    """10 for the sorted list; otherwise credit for each position right, if the items are the same."""
    want = [float(x) for x in reference.split(",")]
    got = _numbers(_first_line(answer))[: len(want) + 2]
    if got == want:
        return 10.0
    if sorted(got) != sorted(want):
        return 0.0
    right = sum(1 for a, b in zip(got, want) if a == b)
    return round(8.0 * right / len(want), 2)


CHECKERS: dict[str, Callable[[str, str, dict], float]] = {
    "numeric": check_numeric,
    "text": check_text,
    "exact": check_exact,
    "list": check_list,
}


class SuiteTooSmall(ConfigError, ValueError):
    """More distinct prompts asked of the suite (or of some categories) than it can make."""


def check_turns(prompt: Prompt, answers: list[str]) -> list[float]:
    """Return the checker score 0-10 of each turn's answer (a missing answer scores 0)."""
    if prompt.checker is None or not prompt.reference:
        raise ValueError(
            f"prompt {prompt.id} has no reference answer: the verifier judge scores only prompts "
            f"with references (the built-in task suite); use an LLM judge for open prompts"
        )
    fn = CHECKERS[prompt.checker]
    return [fn(answers[i] if i < len(answers) else "", ref, prompt.meta) for i, ref in enumerate(prompt.reference)]


def check(prompt: Prompt, answers: list[str]) -> float:
    """Return the mean checker score 0-10 over the prompt's turns."""
    scores = check_turns(prompt, answers)
    return sum(scores) / len(scores)


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


def generate_tasks(n: int, seed: int = 0, categories: list[str] | None = None,
                   exclude: set[str] | frozenset[str] = frozenset()) -> list[Prompt]:
    """Return ``n`` distinct task prompts spread evenly over ``categories`` (all by default).

    The same (n, seed, categories, exclude) always gives the same prompts; ids are a
    hash of the question, so a prompt keeps its id whatever else is generated.
    ``exclude``: questions never to generate (compared without case and surrounding space),
    e.g. the few-shot examples of the contestants' prompt formats: a model shown the answer
    in its prompt must not be tested on it.
    """
    cats = list(categories or CATEGORIES)
    unknown = [c for c in cats if c not in GENERATORS]
    if unknown:
        raise ValueError(f"unknown task categories {unknown}; known: {', '.join(CATEGORIES)}")
    rng = random.Random(seed)
    banned = {q.strip().lower() for q in exclude}
    seen: set[str] = set()
    out: list[Prompt] = []
    attempts = 0
    while len(out) < n:
        cat = cats[len(out) % len(cats)]
        question, ref, checker, meta = GENERATORS[cat](rng)
        attempts += 1
        if attempts > 50 * n + 1000:
            raise SuiteTooSmall(f"the built-in task suite cannot make {n} distinct prompts from categories "
                                f"{', '.join(cats)} (it made {len(out)}): set tasks.n lower, or use open prompts "
                                f"(prompts: set or path) for a larger test set")
        if question in seen or question.strip().lower() in banned:
            continue
        seen.add(question)
        pid = "task-" + hashlib.sha1(question.encode()).hexdigest()[:12]
        out.append(
            Prompt(id=pid, turns=[question], source="builtin-tasks", category=cat,
                   reference=[ref], checker=checker, meta=meta)
        )
    return out
