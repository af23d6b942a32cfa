"""Structured ratings: ask a model to rate untrusted text, read its JSON answer, retry, count.

One component serves every judge that rates text and reads a small JSON object
back: the arena's LLM judges (verdicts on answers), the difficulty judge of
the test set and the LLM moderation judge of the cleaning chain. It gives them:

- **Fencing.** Each untrusted text (a user request, an answer) goes into the
  prompt between markers ``<<<NAME id>>>`` and ``<<<END NAME id>>>``. The id
  is a hash of all the texts of the prompt, so a text cannot know it in
  advance and cannot close its own fence; marker-like runs inside a text
  (``<<<``, ``>>>``) are broken up (``< < <``), so a text cannot even look
  like a fence, nor close a bare ``<<< ... >>>`` block. The id is
  deterministic: the same texts give the same prompt, and the ledger caches it.
- **An output schema.** With ``schema`` the engine is asked to constrain the
  reply to that JSON schema (a llama.cpp grammar, an OpenAI ``json_schema``
  response format).
- **Tolerant parsing.** The caller's ``parse`` reads a value out of the reply
  (helpers: :func:`json_objects`, :func:`bounded_score`, :func:`required`) and
  raises :class:`ParseError` when there is none.
- **Retries.** A reply that does not parse is asked again with a new seed (the
  model's seed + the attempt) and ``retry_temperature``: a new call, so a new
  ledger key. A call that failed is not re-asked now (the ledger retries the
  same call on the next run).
- **Counts.** :class:`RatingStats`: requests, parsed at the first try, parsed
  after a retry, failed, replies cut off at ``max_tokens``, tokens, and the
  calls (served by the ledger or sent).

It sits below ``arena`` and ``curate`` and imports neither.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, TypeVar

from ..progress import Track, tracking
from ..store import Store
from .base import Engine, Request
from .calls import CallStats, arun_requests
from .control_tokens import control_token_flags

T = TypeVar("T")

# ---- fencing ----------------------------------------------------------------------------

_MARKERS = re.compile(r"(<{3,}|>{3,})")


def fence_id(*texts: str) -> str:
    """Return the 10-hex-digit id that marks the fences of one prompt: a hash of all its texts."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:10]


def sanitize(text: str) -> str:
    """Return ``text`` with marker-like runs (three or more ``<`` or ``>``) broken up by spaces."""
    if "<<<" not in text and ">>>" not in text:  # the common case, without a regex pass
        return text
    return _MARKERS.sub(lambda m: " ".join(m.group(0)), text)


def fence(name: str, text: str, fid: str) -> str:
    """Return ``text``, sanitized, between the markers of ``name`` with id ``fid``."""
    return f"<<<{name} {fid}>>>\n{sanitize(text)}\n<<<END {name} {fid}>>>"


def fenced(name: str, text: str) -> str:
    """Return ``text`` alone in a fence whose id is the hash of the text (one text per prompt)."""
    return fence(name, text, fence_id(name, text))


# ---- text that addresses the judge -------------------------------------------------------

_INJECTION_PARTS = (
    r"ignore (?:all |any |the )?(?:previous|above|prior|earlier|preceding)",
    r"disregard (?:all |any |the )?(?:previous|above|prior|instructions)",
    r"(?:new|updated) instructions?\s*:",
    r"you are (?:now )?(?:the|a) judge",
    r"as the judge,? you",
    r"(?:give|assign|award|rate) (?:answer|assistant|response) ?[ab12]?\b.{0,20}"
    r"\b(?:10|ten|a (?:perfect|higher) score)",
    r"score_[ab]\s*[\"']?\s*[:=]",
    r"\[\[\s*\d+\s*\]\]",
    r"^\s*(?:system|judge)\s*:",
)
_INJECTION = re.compile("|".join(_INJECTION_PARTS), re.I | re.M)
# The same patterns, case-sensitive, one by one, on lower-cased text: Python's regex engine
# scans for a literal prefix quickly but tries every branch of an alternation at every
# position of a case-insensitive search, 4x slower on real answers. They only decide whether
# the full pattern is worth running; the flag itself comes from the full pattern.
_INJECTION_LOWER = tuple(re.compile(p, re.M) for p in _INJECTION_PARTS)
# Characters that IGNORECASE matches to an ASCII letter but str.lower() does not map to one
# (re._casefix); mapped first so the lower-cased prefilter never misses a match.
_TO_ASCII = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
# Each lower-cased pattern above runs only when the lower-cased text holds one of its words, text
# that every match of it contains (a substring test costs a fraction of a regex pass, and most
# answers hold none of them): the scan reads every answer of a run, 12 patterns each.
_INJECTION_WORDS: tuple[tuple[str, ...], ...] = (
    ("ignore ",),
    ("disregard ",),
    ("instruction",),
    ("judge",),
    ("judge",),
    ("give ", "assign ", "award ", "rate "),
    ("score_",),
    ("[[",),
    ("system", "judge"),
)
assert len(_INJECTION_WORDS) == len(_INJECTION_PARTS), "one tuple of words per injection pattern"
_WORDS = tuple(dict.fromkeys(w for words in _INJECTION_WORDS for w in words))  # each looked for once


# Other ways an answer addresses its judge: fake end-of-answer tags in other notations, rubric
# changes, and characters a person does not see (zero-width, bidi overrides, Unicode tags).
_FAKE_END = re.compile(
    r"</\s*(?:answer|response|assistant|output)\s*>|\[\s*/?\s*end[ _-]*of[ _-]*(?:the[ _-]*)?(?:answer|response)\s*\]"
    r"|#{2,}\s*end\s+of\s+(?:the\s+)?(?:answer|response)|(?:^|\n)\s*(?:END|End) OF (?:ANSWER|RESPONSE)\b",
    re.I,
)
# What every match of _FAKE_END holds, lower-cased, besides "</": "end" then "of" with only spaces, "_"
# or "-" between (a pattern with a literal prefix, which the regex engine finds fast).
_END_OF = re.compile(r"end[\s_-]*of")
_RUBRIC = re.compile(
    r"\b(?:new|updated|revised|changed|real|actual) (?:scoring |grading |evaluation )?(?:rubric|criteria|guidelines)\b"
    r"|\brubric (?:has (?:been )?changed|now (?:says|requires)|says)\b"
    r"|\bgrade (?:this|these|the) (?:answer|response)s? (?:on|by)\b",
    re.I,
)
_RUBRIC_WORDS = ("rubric", "criteria", "guidelines", "grade ")  # one of them is in every match, lower-cased
_INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f]")


@lru_cache(maxsize=65536)
def _injection_flags(text: str) -> tuple[str, ...]:
    flags = []
    if "<<<" in text or ">>>" in text:
        flags.append("fence-markers")
    tokens = control_token_flags(text)
    if tokens:
        flags.append(f"control-tokens: {', '.join(tokens)}")
    ascii_only = text.isascii()  # then no invisible characters, nothing for _TO_ASCII to map
    low = (text if ascii_only else text.translate(_TO_ASCII)).lower()
    if ("</" in low or _END_OF.search(low)) and (fake_end := _FAKE_END.search(text)):
        flags.append(f"fake-end-of-answer: {fake_end.group(0).strip()[:40]!r}")
    if any(w in low for w in _RUBRIC_WORDS) and (rubric := _RUBRIC.search(text)):
        flags.append(f"rubric-change: {rubric.group(0).strip()[:40]!r}")
    if not ascii_only and _INVISIBLE.search(text):
        flags.append("invisible-characters")
    present = {w for w in _WORDS if w in low}
    if present and any(present.intersection(words) and p.search(low)
                       for p, words in zip(_INJECTION_LOWER, _INJECTION_WORDS)):
        m = _INJECTION.search(text)
        if m:
            flags.append(f"instructions-to-judge: {m.group(0).strip()[:40]!r}")
    return tuple(flags)


def injection_flags(text: str) -> list[str]:
    """Return why ``text`` looks like it addresses the judge (empty when it does not).

    Cached per text: an answer plays in many games (every pair, both orders) and is
    scanned once.
    """
    return list(_injection_flags(text))


# ---- tolerant parsing --------------------------------------------------------------------


class ParseError(ValueError):
    """The reply holds no valid value; the message says what was missing."""


def json_objects(text: str) -> list[dict[str, Any]]:
    """Return the JSON objects found in ``text``, in order: each balanced ``{...}`` that decodes to a dict."""
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = text.find("{", end)
    return found


def bounded_score(value: Any, key: str, low: float = 1.0, high: float = 10.0) -> float:
    """Return ``value`` as a float in [low, high]; raise ParseError otherwise.

    Never clamped: a fix would change results.
    """
    if isinstance(value, bool) or value is None:
        raise ParseError(f"{key} is {value!r}, not a number")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ParseError(f"{key} is {value!r}, not a number") from None
    if not low <= x <= high:
        raise ParseError(f"{key} = {x:g} is outside {low:g}-{high:g}")
    return x


def required(parse: Callable[[str], T | None], what: str) -> Callable[[str], T]:
    """Return ``parse`` turned strict: a None result raises ParseError naming ``what`` was not found."""

    def strict(text: str) -> T:
        value = parse(text)
        if value is None:
            raise ParseError(f"no {what} found in {text.strip()[:120]!r}")
        return value

    return strict


# ---- rating -------------------------------------------------------------------------------


@dataclass
class RatingStats:
    """What rating did: parsed at the first try, after a retry, failed; replies cut off; tokens; calls."""

    requests: int = 0
    parsed: int = 0
    retried: int = 0  # parsed only after at least one retry
    failed: int = 0  # no value: every reply unparsable, or the call failed
    truncated: int = 0  # final replies cut off at max_tokens (parsed or not)
    tokens_in: int = 0  # over every reply behind the ratings, served from the ledger or not
    tokens_out: int = 0
    calls: CallStats = field(default_factory=CallStats)  # this run's calls: tokens of the new ones only

    def add(self, other: RatingStats) -> None:
        """Add ``other``'s counts to these."""
        self.requests += other.requests
        self.parsed += other.parsed
        self.retried += other.retried
        self.failed += other.failed
        self.truncated += other.truncated
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.calls.add(other.calls)

    def counts(self) -> dict[str, int]:
        """Return the rating counts (parsed, retried, failed, truncated) as a dict, for summaries."""
        return {"parsed": self.parsed, "retried": self.retried, "failed": self.failed, "truncated": self.truncated}


@dataclass
class Rated(Generic[T]):
    """One rating request's outcome: the value (when ``ok``), the raw reply, why it failed."""

    ok: bool = False
    value: T | None = None
    raw: str = ""
    error: str = ""
    attempts: int = 0
    truncated: bool = False  # the reply kept (the last one) was cut off at max_tokens


class StructuredRater(Generic[T]):
    """Rates prompts on ``engine`` through the ledger: schema, tolerant ``parse``, retries, counts.

    ``parse`` turns a reply into a value or raises :class:`ParseError` (any ``ValueError``
    counts as a reply that did not parse). ``params`` are
    the sampling params of every request (the engine's own apply beneath them);
    ``schema`` asks the engine to constrain the reply; ``retries`` re-asks of an
    unparsable reply use the model's seed + the attempt and ``retry_temperature``.
    ``what`` names the rater in messages ("judge", "difficulty judge").
    """

    def __init__(
        self,
        engine: Engine,
        parse: Callable[[str], T],
        *,
        params: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        retries: int = 0,
        retry_temperature: float = 0.7,
        what: str = "rating",
        stats: RatingStats | None = None,
    ):
        # A rating must be parsed from the reply: an empty one is a failed call, retried on the next run, never a
        # contestant's kept answer (engines.calls); the ledger keys do not depend on it.
        if engine.spec.empty_replies != "fail":
            engine.spec = engine.spec.model_copy(update={"empty_replies": "fail", "empty_retries": 0})
        self.engine = engine
        self.parse = parse
        self.params = dict(params or {})
        self.schema = schema
        self.retries = retries
        self.retry_temperature = retry_temperature
        self.what = what
        self.stats = stats if stats is not None else RatingStats()

    def params_for(self, attempt: int) -> dict[str, Any]:
        """Return the request params of try ``attempt`` (0: the first)."""
        params = dict(self.params)
        if self.schema is not None:
            params["json_schema"] = self.schema
        if attempt > 0:
            # A retry must be a different call (else the ledger answers it with the same text).
            base = params.get("seed", self.engine.default_params()["seed"])
            params["seed"] = int(base) + attempt
            params["temperature"] = self.retry_temperature
        return params

    async def arate(
        self, store: Store, prompts: Sequence[list[dict[str, str]]], *, label: str | None = None,
        progress: Track | None = None,
    ) -> list[Rated[T]]:
        """Return one :class:`Rated` per prompt (chat messages), in order; counts go to ``self.stats``."""
        label = label or self.what
        out: list[Rated[T]] = [Rated() for _ in prompts]
        pending = list(range(len(prompts)))
        failed_calls = 0
        stats = self.stats
        stats.requests += len(prompts)
        for attempt in range(self.retries + 1):
            if not pending:
                break
            params = self.params_for(attempt)
            requests = [Request.model_construct(messages=prompts[i], prompt=None, params=params) for i in pending]
            tag = label if attempt == 0 else f"{label} (retry {attempt})"
            results = await arun_requests(store, self.engine, requests, label=tag, stats=stats.calls,
                                          progress=progress)
            still = []
            for i, comp in zip(pending, results):
                item = out[i]
                item.attempts = attempt + 1
                if comp is None:
                    # A failed call is not re-asked now with retry settings (that would swap the
                    # value for a warmer sample); the ledger retries the same call on the next run.
                    item.error = f"the {self.what} call failed (see the ledger); retried on the next run"
                    failed_calls += 1
                    continue
                stats.tokens_in += comp.tokens_in
                stats.tokens_out += comp.tokens_out
                item.raw = comp.text
                item.truncated = comp.finish_reason == "length"
                try:
                    item.value = self.parse(comp.text)
                except ValueError as err:  # ParseError, or any ValueError of the caller's parser
                    item.error = str(err) or type(err).__name__
                    if item.truncated:
                        item.error += " (the reply was cut off at max_tokens: raise the model's max_tokens)"
                    still.append(i)
                    continue
                item.ok, item.error = True, ""
                if attempt == 0:
                    stats.parsed += 1
                else:
                    stats.retried += 1
            pending = still
        stats.failed += len(pending) + failed_calls
        stats.truncated += sum(1 for item in out if item.truncated)
        return out

    def rate(
        self, store: Store, prompts: Sequence[list[dict[str, str]]], *, label: str | None = None,
        show_progress: bool = True,
    ) -> list[Rated[T]]:
        """Synchronous :meth:`arate`, with a progress bar."""
        if not show_progress:
            return asyncio.run(self.arate(store, prompts, label=label))
        with tracking() as progress:
            return asyncio.run(self.arate(store, prompts, label=label, progress=progress))


class TextJudge(Generic[T]):
    """Asks a model one question about each text, through the engine and the ledger; a result or None per text.

    The shape of the curation judges (moderation, difficulty): ``messages(text)`` builds the
    fenced request, ``parse`` reads a reply (None when it holds no result; ``expects`` names what
    was missing), a :class:`StructuredRater` retries and counts, and ``stats`` holds the counts.
    ``schema`` is passed for the engine to enforce only with ``constrain``.
    """

    def __init__(self, store: Store, spec: Any, *, messages: Callable[[str], list[dict[str, str]]],
                 parse: Callable[[str], T | None], expects: str, schema: dict[str, Any], what: str, label: str,
                 constrain: bool = False, retries: int = 1, retry_temperature: float = 0.7,
                 show_progress: bool = True):
        from . import build_engine

        self.store = store
        self.label = label
        self.show_progress = show_progress
        self.messages = messages
        # The engine applies the spec's own sampling params (and keys the ledger on them).
        self.rater: StructuredRater[T] = StructuredRater(
            build_engine(spec), required(parse, expects), schema=schema if constrain else None, retries=retries,
            retry_temperature=retry_temperature, what=what,
        )
        self.stats = self.rater.stats

    def __call__(self, texts: list[str]) -> list[T | None]:
        from .spend import staged

        with staged(self.rater.what.removesuffix(" judge")):  # the ledger's stage: difficulty, moderation
            rated = self.rater.rate(self.store, [self.messages(t) for t in texts], label=self.label,
                                    show_progress=self.show_progress)
        return [r.value if r.ok else None for r in rated]

