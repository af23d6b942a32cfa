"""Suite 2, the flywheel's world: verifiable categories with learnable structure, tiers and no shortcuts.

Version 1 (``suite.py``) was made for the arena quickstart: nine categories a small base model
partly solves. As a world for the flywheel it ran out of distinct items (capitals, letter case and
reverse were used up after the test set and three slices) and it rewarded shortcuts (in
comparison, "say the second number" was right on 19 of 30 test items). Version 2 fixes both:

- every category makes thousands of distinct items (at least ten training slices of 320 beyond a
  270-prompt test set), from rules a model can learn (arithmetic by carries, dates, word problems,
  string operations), each item tagged with a difficulty tier 1-3 (``meta["tier"]``);
- items are balanced by construction, not by chance: each generator takes the item's slot (how
  many items of its category the set already holds) and derives the balanced choices from it
  (answer position, larger/smaller, yes/no, ascending/descending, the answer's value in counting),
  so any 2, 4 or 12 consecutive items of a category are exactly balanced. A constant answer, a
  positional answer ("the first number"), a length rule or a direction-blind rule scores at the
  category's chance level (``CATEGORY_INFO[cat].chance``), which ``shortcuts.py`` measures;
- capitals is left out: it is knowledge, not a rule, so a disjoint training slice cannot teach it,
  and 79 countries cannot fill ten slices. (``tasks.categories`` of suite 1 still has it.)

Each category's checker and its rule are in ``CATEGORY_INFO`` (and the table in docs/flywheel-world.md).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from .checks import MONTHS

Task = tuple[str, str, str, dict]
"""(question, reference answer, checker name, meta)."""

WORDS = sorted(set("""
apple banana cherry garden rocket silver planet window yellow market pencil castle dragon forest guitar harbor
island jungle kitten ladder mirror number orange pepper rabbit summer tomato violet winter zebra letter butter
coffee moon sun tree river cloud stone bridge anchor basket blanket bottle branch bucket button camera candle
carpet carrot circle collar copper corner cotton cousin dinner doctor dollar donkey drawer engine family farmer
finger flower friend garlic ginger glove hammer helmet honey hunter jacket kettle kingdom lemon lizard magnet
meadow melon monkey mother muffin napkin needle nickel noodle office onion oyster paddle palace parrot peanut
pebble pillow pirate pocket potato pumpkin puzzle quilt radio raisin rain ribbon saddle salmon sandal school
shadow shovel signal sister socket spider spoon square statue sugar sweater table teacher tennis ticket tiger
timber toast towel tunnel turtle valley velvet wagon walnut water wheel whistle wizard wolf wonder acorn
almond arrow autumn bakery barrel beacon beaver berry bicycle biscuit blossom boulder bracelet breeze cabin
cactus canyon captain cereal chapter cheese chimney cinema clover compass cookie crayon crystal daisy desert
diamond dolphin eagle elbow falcon feather festival fiddle fossil fountain galaxy giraffe glacier goblet grape
gravel hazel hedgehog hiking horizon iceberg jelly journey koala lantern lobster locket mango maple marble
meteor mitten mustard nectar nutmeg octopus olive orchard otter panther parade peach pearl pepperoni penguin
pickle piano pilot pirate plum poem pony quartz rainbow raven robot saffron sailor scarf seagull sketch sparrow
spinach sponge squirrel stable storm sunset swan tablet thimble thunder tulip tuxedo umbrella unicorn vanilla
walrus wallet whale willow yogurt zipper bamboo beetle cobalt dusk ember fabric gadget hollow insect jigsaw
kernel lagoon mosaic nugget orbit pastel quiver ripple sapphire tundra velvet waffle badge cargo denim fern
glider harp ivory jade kiwi linen moss notch opal prism relic skate tide vessel yarn bell boat cake coat desk door
drum duck fish frog gate goat kite lamp leaf lion nest ring rose sand ship shoe sock star vase wind yard bird book
cave corn deer dove farm fork hill king lake milk road rock seed soap snow cabbage chicken curtain hammock kitchen
lettuce mailbox pancake peacock pelican pyramid sausage tractor trumpet volcano weather airplane alphabet backpack
blizzard building calendar cardinal cucumber dinosaur elephant envelope football hospital kangaroo keyboard
magazine mountain notebook painting question sandwich scorpion shoulder sidewalk tortoise treasure vacation
woodland zucchini blueberry pineapple chocolate butterfly crocodile raspberry telescope fireplace snowflake
submarine waterfall adventure astronaut cranberry
""".split()))
"""Common nouns of 3-10 letters, no palindrome: the words of the string categories."""

NAMES = ["Anna", "Ben", "Carla", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jack", "Kate", "Liam", "Maya",
         "Noah", "Olga", "Paul", "Rosa", "Sam", "Tara", "Umar", "Vera", "Will", "Yara", "Zoe"]
OBJECTS = ["apples", "books", "coins", "stickers", "pencils", "marbles", "cookies", "shells", "stamps", "cards",
           "balloons", "candies", "flowers", "toys", "eggs", "buttons"]
UNITS = [
    ("meters", "centimeters", 100), ("kilometers", "meters", 1000), ("hours", "minutes", 60),
    ("minutes", "seconds", 60), ("kilograms", "grams", 1000), ("days", "hours", 24), ("feet", "inches", 12),
    ("weeks", "days", 7), ("liters", "milliliters", 1000), ("dollars", "cents", 100), ("yards", "feet", 3),
    ("years", "months", 12), ("dozens", "items", 12), ("centimeters", "millimeters", 10),
    ("gallons", "quarts", 4), ("pounds", "ounces", 16),
]
MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]   # 2025, not a leap year
LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class CategoryInfo:
    """What a category asks, how its checker scores it, its tiers, and the exact-answer rate of a shortcut."""

    asks: str
    checker: str
    rule: str
    tiers: str
    chance: float
    """The exact-answer share of the best shortcut policy (a constant, positional, length or
    direction-blind answer) on a balanced set: what a model gets without doing the task. Letter
    case's is a third: "uppercase the quoted text, whatever is asked" does one of its three kinds.
    Partial credit is no way around it: each policy's mean score is at most 10 x chance (tested)."""


CATEGORY_INFO: dict[str, CategoryInfo] = {
    "arithmetic": CategoryInfo(
        "add or subtract two 2-3 digit numbers", "numeric",
        "10: the first number of the first line is the result; 7 within 1%, 3 within 10% (an operand never) or right "
        "but not first",
        "1: no carry (or borrow), 2: one, 3: two or more", 0.02),
    "word_problem": CategoryInfo(
        "a one-step word problem: gets more, gives away, groups of, shares equally", "numeric",
        "10: the first number of the first line is the result; 3 right but not first",
        "1: add or subtract, 2: multiply, 3: divide", 0.06),
    "unit_conversion": CategoryInfo(
        "convert a whole number of one unit into another (16 unit pairs)", "numeric",
        "10: the first number of the first line is the result; 3 right but not first",
        "1: 2-20 large units into small, 2: 21-99 large units into small, 3: small units into large", 0.03),
    "date_arithmetic": CategoryInfo(
        "the date a number of days after a date of 2025", "date",
        "10: the first 'Month day' of the first line is the reference (a year after it ignored); 3 buried",
        "1: 1-9 days within the month, 2: 10-20 days within the month, 3: into the next month", 0.02),
    "comparison": CategoryInfo(
        "the larger or the smaller of two numbers with the same number of digits", "numeric",
        "10: the first number of the first line is the reference; no partial credit (both numbers listed: a hedge)",
        "1: 2 digits, 2: 3 digits, 3: 3 digits with the same hundreds",
        0.5),
    "yes_no": CategoryInfo(
        "a yes/no question: even or odd, divisible by 2-9, greater than", "text",
        "10: 'yes' or 'no' as the first line (case and punctuation ignored); 6 if the word is in the first line "
        "(0 if the other is too)",
        "1: even/odd, 2: greater than, 3: divisible by", 0.5),
    "sorting": CategoryInfo(
        "sort 3-6 numbers from smallest to largest or from largest to smallest", "list",
        "10: the sorted list (first line); else 8 x the share of the positions the shown order has wrong that are "
        "now right, if the numbers are the same (the opposite order: 0)",
        "1: 3 numbers, 2: 4-5 numbers, 3: 6 numbers", 0.5),
    "sequence": CategoryInfo(
        "the next number of a sequence of four", "numeric",
        "10: the first number of the first line is the next term",
        "1: add 1-5, 2: add 6-15 or subtract, 3: double or growing steps", 0.03),
    "counting": CategoryInfo(
        "letters in a word, times a letter appears in two words, numbers in a list", "numeric",
        "10: the first number of the first line is the count",
        "1: 3-8 numbers in a list, 2: letters in a word of 4-7, 3: a letter 1-3 times", 0.17),
    "letter_case": CategoryInfo(
        "a word in uppercase, a mixed-case word in lowercase, words with each word capitalized", "word",
        "10: exactly the reference (quotes, final period ignored); 5 right but for case (the word as shown: 0); 4 "
        "buried as a whole word",
        "1: uppercase, 2: lowercase, 3: capitalize each of 2-3 words", 0.34),
    "reverse": CategoryInfo(
        "a word spelled backwards, a number's digits or three words in reverse order", "word",
        "10: exactly the reference (quotes, final period ignored); 5 right but for case; 4 buried as a whole word",
        "1: a word of 3-6 letters, 2: a word of 7-9 letters or the digits of a number, 3: three words in reverse order",
        0.01),
    "string_ops": CategoryInfo(
        "the first or last letter of a word, its first three letters, two words joined", "word",
        "10: exactly the reference (quotes, final period ignored); 5 right but for case; 4 buried as a whole word",
        "1: first letter or joined, 2: last letter, 3: first three letters", 0.06),
}
CATEGORIES = list(CATEGORY_INFO)


def _carries(a: int, b: int, op: str) -> int:
    """Carries of ``a + b`` (borrows of ``a - b``) column by column."""
    n, carry = 0, 0
    while a or b:
        da, db = a % 10, b % 10
        if op == "+":
            carry = 1 if da + db + carry >= 10 else 0
        else:
            carry = 1 if da - db - carry < 0 else 0
        n += carry
        a, b = a // 10, b // 10
    return n


def _arithmetic(rng: random.Random, slot: int) -> Task:
    tier, op = slot % 3, "+-"[(slot // 3) % 2]
    while True:
        digits = rng.choice([2, 3])
        a, b = rng.randint(10 ** (digits - 1), 10**digits - 1), rng.randint(10, 10**digits - 1)
        if op == "-" and (a <= b or a == 2 * b):
            continue
        if min(_carries(a, b, op), 2) == tier:
            break
    value = a + b if op == "+" else a - b
    return f"What is {a} {op} {b}?", str(value), "numeric", {"closeness": True, "tier": tier + 1}


def _word_problem(rng: random.Random, slot: int) -> Task:
    kind = slot % 4
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    if kind == 0:
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        q, value = f"{name} has {a} {obj} and gets {b} more. How many {obj} does {name} have now?", a + b
    elif kind == 1:
        while True:
            a, b = rng.randint(5, 90), rng.randint(2, 60)
            if b < a and a != 2 * b:
                break
        q, value = f"{name} has {a} {obj} and gives {b} of them away. How many {obj} does {name} have left?", a - b
    elif kind == 2:
        a, b = rng.sample(range(2, 10), 2)
        q, value = f"{name} buys {a} bags with {b} {obj} in each bag. How many {obj} does {name} buy?", a * b
    else:
        each, friends = rng.sample(range(2, 10), 2)
        q = (f"{name} shares {each * friends} {obj} equally among {friends} friends. How many {obj} does each "
             f"friend get?")
        value = each
    return q, str(value), "numeric", {"tier": (1, 1, 2, 3)[kind]}


def _unit_conversion(rng: random.Random, slot: int) -> Task:
    tier = slot % 3
    big, small, factor = rng.choice(UNITS)
    if tier == 2:
        n = rng.randint(2, 30)
        return f"How many {big} are in {n * factor} {small}?", str(n), "numeric", {"tier": 3}
    n = rng.randint(2, 20) if tier == 0 else rng.randint(21, 99)
    return f"How many {small} are in {n} {big}?", str(n * factor), "numeric", {"tier": tier + 1}


def _date_arithmetic(rng: random.Random, slot: int) -> Task:
    tier = slot % 3
    month = rng.randrange(12)
    length = MONTH_DAYS[month]
    if tier == 2:
        days = rng.randint(2, 20)
        day = rng.randint(max(1, length - days + 1), length)
    else:
        days = rng.randint(1, 9) if tier == 0 else rng.randint(10, 20)
        day = rng.randint(1, length - days)
    end, m = day + days, month
    if end > length:
        end, m = end - length, (month + 1) % 12
    day_word = "day" if days == 1 else "days"
    return (f"What date is {days} {day_word} after {MONTHS[month]} {day}, 2025?", f"{MONTHS[m]} {end}", "date",
            {"tier": tier + 1})


def _comparison(rng: random.Random, slot: int) -> Task:
    first_is_answer, larger, tier = slot % 2 == 0, (slot // 2) % 2 == 0, (slot // 4) % 3
    if tier == 0:
        a, b = rng.sample(range(10, 100), 2)
    elif tier == 1:
        a, b = rng.sample(range(100, 1000), 2)
    else:
        hundreds = rng.randint(1, 9) * 100
        a, b = (hundreds + x for x in rng.sample(range(100), 2))
    answer, other = (max(a, b), min(a, b)) if larger else (min(a, b), max(a, b))
    x, y = (answer, other) if first_is_answer else (other, answer)
    word = "larger" if larger else "smaller"
    return f"Which number is {word}, {x} or {y}?", str(answer), "numeric", {"tier": tier + 1}


def _yes_no(rng: random.Random, slot: int) -> Task:
    yes, kind = slot % 2 == 0, (slot // 2) % 3
    if kind == 0:
        n = rng.randint(11, 999)
        even = n % 2 == 0
        ask_even = even == yes
        q = f"Is {n} an {'even' if ask_even else 'odd'} number?"
    elif kind == 1:
        a, b = rng.sample(range(10, 1000), 2)
        if (a > b) != yes:
            a, b = b, a
        q = f"Is {a} greater than {b}?"
    else:
        d = rng.randint(2, 9)
        while True:
            n = rng.randint(11, 300)
            if (n % d == 0) == yes:
                break
        q = f"Is {n} divisible by {d}?"
    return q, "yes" if yes else "no", "text", {"tier": (1, 2, 3)[kind]}


def _sorting(rng: random.Random, slot: int) -> Task:
    ascending, tier = slot % 2 == 0, (slot // 2) % 3
    size = (3, rng.choice([4, 5]), 6)[tier]
    while True:
        nums = rng.sample(range(1, 100), size)
        if nums != sorted(nums) and nums != sorted(nums, reverse=True):
            break
    ref = ",".join(str(n) for n in sorted(nums, reverse=not ascending))
    shown = ", ".join(str(n) for n in nums)
    order = "from smallest to largest" if ascending else "from largest to smallest"
    return f"Sort these numbers {order}: {shown}.", ref, "list", {"tier": tier + 1}


def _sequence(rng: random.Random, slot: int) -> Task:
    tier = slot % 3
    if tier == 0:
        start, step = rng.randint(1, 50), rng.randint(1, 5)
        seq = [start + step * i for i in range(5)]
    elif tier == 1 and rng.random() < 0.5:
        step = rng.randint(2, 12)
        start = rng.randint(5 * step, 99)
        seq = [start - step * i for i in range(5)]
    elif tier == 1:
        start, step = rng.randint(1, 50), rng.randint(6, 15)
        seq = [start + step * i for i in range(5)]
    elif rng.random() < 0.3:
        start = rng.randint(1, 15)
        seq = [start * 2**i for i in range(5)]
    else:
        start, d0 = rng.randint(1, 60), rng.randint(1, 6)
        seq = [start]
        for i in range(4):
            seq.append(seq[-1] + d0 + i)
    shown = ", ".join(str(x) for x in seq[:4])
    return f"What number comes next in the sequence {shown}, ...?", str(seq[4]), "numeric", {"tier": tier + 1}


def _counting(rng: random.Random, slot: int) -> Task:
    kind, target = slot % 3, (slot // 3)
    if kind == 0:
        size = 3 + target % 6
        nums = [rng.randint(10, 99) for _ in range(size)]
        shown = ", ".join(str(n) for n in nums)
        return f"How many numbers are in this list: {shown}?", str(size), "numeric", {"tier": 1}
    if kind == 1:
        length = 4 + target % 4
        word = rng.choice([w for w in WORDS if len(w) == length])
        return f"How many letters are in the word '{word}'?", str(length), "numeric", {"tier": 2}
    want = 1 + target % 3
    while True:
        phrase = " ".join(rng.sample(WORDS, 2))
        letter = rng.choice(sorted(set(phrase) - {" "}))
        if phrase.count(letter) == want:
            break
    return f"How many times does the letter '{letter}' appear in '{phrase}'?", str(want), "numeric", {"tier": 3}


def _letter_case(rng: random.Random, slot: int) -> Task:
    kind = slot % 3
    if kind == 0:
        word = rng.choice(WORDS)
        return f"Write the word '{word}' in uppercase letters.", word.upper(), "word", {"tier": 1}
    if kind == 1:
        word = rng.choice([w for w in WORDS if len(w) >= 4])
        while True:
            mixed = "".join(c.upper() if rng.random() < 0.5 else c for c in word)
            if mixed.lower() != mixed and mixed.upper() != mixed:
                break
        return f"Write the word '{mixed}' in lowercase letters.", word, "word", {"tier": 2}
    words = rng.sample(WORDS, rng.choice([2, 3]))
    return (f"Write '{' '.join(words)}' with each word capitalized.", " ".join(w.capitalize() for w in words),
            "word", {"tier": 3})


def _reverse(rng: random.Random, slot: int) -> Task:
    tier = slot % 3
    if tier == 2:
        words = rng.sample(WORDS, 3)
        return (f"Write the words '{' '.join(words)}' in reverse order.", " ".join(reversed(words)), "word",
                {"tier": 3})
    if tier == 1 and rng.random() < 0.5:
        while True:
            digits = str(rng.randint(1000, 999999))
            if digits != digits[::-1] and not digits.endswith("0"):
                break
        return f"Write the digits of {digits} in reverse order.", digits[::-1], "word", {"tier": 2}
    word = rng.choice([w for w in WORDS if (len(w) <= 6) == (tier == 0)])   # 3-6 letters: 294 words, 7-9: 106
    return f"Spell the word '{word}' backwards.", word[::-1], "word", {"tier": tier + 1}


def _string_ops(rng: random.Random, slot: int) -> Task:
    kind = slot % 4
    if kind == 0:
        word = rng.choice(WORDS)
        return f"What is the first letter of the word '{word}'?", word[0], "word", {"tier": 1}
    if kind == 1:
        a, b = rng.sample(WORDS, 2)
        return f"Join the words '{a}' and '{b}' into one word.", a + b, "word", {"tier": 1}
    if kind == 2:
        word = rng.choice(WORDS)
        return f"What is the last letter of the word '{word}'?", word[-1], "word", {"tier": 2}
    word = rng.choice([w for w in WORDS if len(w) >= 5])
    return f"What are the first three letters of the word '{word}'?", word[:3], "word", {"tier": 3}


GENERATORS: dict[str, Callable[[random.Random, int], Task]] = {
    "arithmetic": _arithmetic,
    "word_problem": _word_problem,
    "unit_conversion": _unit_conversion,
    "date_arithmetic": _date_arithmetic,
    "comparison": _comparison,
    "yes_no": _yes_no,
    "sorting": _sorting,
    "sequence": _sequence,
    "counting": _counting,
    "letter_case": _letter_case,
    "reverse": _reverse,
    "string_ops": _string_ops,
}
assert list(GENERATORS) == CATEGORIES
