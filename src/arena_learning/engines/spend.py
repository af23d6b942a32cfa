"""What model calls cost, which stage asked, and the limit a run may spend.

Every call the ledger records carries its stage and its price in USD (``call_cost``: the tokens the
server counted times the model's ``price_in`` / ``price_out`` per 1M tokens, times ``batch_price`` for a
batch call), so ``arena info`` sums what a workspace spent without the config.

``spending(store, stage, limit_usd)`` wraps a stage: its calls are recorded under ``stage``, and with a
limit, a guard holds the workspace's spend (what its ledger recorded, every run together) under the
limit. Each call reserves its upper bound before it is sent (input estimated as ``arena plan`` does,
output at ``max_tokens``), so calls in flight count at the most they can cost; a reservation that would
pass the limit stops the stage: no call is sent after it, those in flight finish and are recorded, and
``SpendLimitReached`` says what was spent, what is left and how to go on. A rerun with a higher limit
resumes from the ledger: nothing done is asked (or paid) again.

A batch runner checks a whole batch at once: ``check_spend(projected_usd)`` reserves its upper bound (or
raises), ``settle_spend(projected_usd, paid_usd)`` once its results are in the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ..errors import SpendLimitReached
from .base import render_completion_prompt

if TYPE_CHECKING:
    from ..config import ModelSpec
    from ..store import Store
    from .base import Engine, Request

CHARS_PER_TOKEN = 4
"""The token estimate of a text: characters / 4 (``arena plan``'s and the spend guard's)."""

TEMPLATE_TOKENS = 4
"""Tokens a chat template adds around each message (estimated)."""


def estimate_tokens(text_chars: int) -> int:
    """Return the token estimate of ``text_chars`` characters (characters / 4, rounded up)."""
    return math.ceil(text_chars / CHARS_PER_TOKEN)


def request_chars(spec: ModelSpec, messages: list[dict[str, str]]) -> int:
    """Return the characters a request of ``messages`` sends to ``spec``'s model (its template estimated)."""
    if spec.mode == "completion":
        return len(render_completion_prompt(spec.prompt_format, messages))
    return sum(len(m["content"]) + TEMPLATE_TOKENS * CHARS_PER_TOKEN for m in messages)


def call_cost(spec: ModelSpec, tokens_in: int, tokens_out: int, *, batch: bool = False) -> float:
    """Return the USD price of a call of ``spec``'s model: tokens at price_in / price_out per 1M tokens,
    times the model's batch price for a batch call."""
    usd = (tokens_in * spec.price_in + tokens_out * spec.price_out) / 1e6
    if batch:
        usd *= spec.batch_price if spec.batch_price is not None else 1.0
    return usd


def upper_bound(engine: Engine, request: Request) -> float:
    """Return the most ``request`` can cost on ``engine``: its input estimated, its output at max_tokens."""
    spec = engine.spec
    if request.messages is not None:
        chars = request_chars(spec, request.messages)
    else:
        chars = len(request.prompt or "")
    max_out = int({**engine.default_params(), **request.params}.get("max_tokens") or spec.params.max_tokens)
    return call_cost(spec, estimate_tokens(chars), max_out)


class SpendGuard:
    """The spend of one stage's workspace against its limit: paid (recorded) and held (calls in flight)."""

    def __init__(self, limit_usd: float, spent_usd: float, workspace: str):
        self.limit = limit_usd
        self.spent = spent_usd
        self.held = 0.0
        self.workspace = workspace
        self.stopped = 0  # calls (or batches) not sent because they could pass the limit

    def reserve(self, usd: float) -> bool:
        """Hold ``usd`` for a call about to be sent; False (and nothing held) if it could pass the limit, and
        after the first refusal always (the stage stops; what is in flight finishes)."""
        if self.stopped or self.spent + self.held + usd > self.limit:
            self.stopped += 1
            return False
        self.held += usd
        return True

    def settle(self, held: float, paid: float) -> None:
        """Release a reservation of ``held`` for a call that cost ``paid`` (0 for a failed one)."""
        self.held -= held
        self.spent += paid

    def error(self) -> SpendLimitReached:
        """Return the error that stops the run: what was spent, what is left, how to go on."""
        left = max(0.0, self.limit - self.spent)
        return SpendLimitReached(
            f"spend limit reached: ${self.spent:.4f} spent in {self.workspace} of spend_limit.usd ${self.limit:.4f} "
            f"(${left:.4f} left); {self.stopped} call(s) not sent, as each could pass the limit at its max_tokens. "
            f"Everything done is kept in the ledger: raise spend_limit.usd (e.g. --set spend_limit.usd=N) and run "
            f"again; the run resumes where it stopped and pays for no call twice (`arena plan` prices what is left)")


_STAGE: ContextVar[str | None] = ContextVar("spend_stage", default=None)
_GUARD: ContextVar[SpendGuard | None] = ContextVar("spend_guard", default=None)


def current_stage() -> str | None:
    """Return the stage the calls made now belong to (None: outside any ``spending`` block)."""
    return _STAGE.get()


def current_guard() -> SpendGuard | None:
    """Return the spend guard of the stage under way (None: no limit)."""
    return _GUARD.get()


@contextmanager
def spending(store: Store, stage: str, limit_usd: float | None = None) -> Iterator[SpendGuard | None]:
    """Within the block, calls are recorded under ``stage`` and (``limit_usd``) held under the limit, counted
    from what the workspace's ledger has spent so far."""
    guard = SpendGuard(limit_usd, store.spent_usd(), str(store.root)) if limit_usd is not None else None
    stage_token = _STAGE.set(stage)
    guard_token = _GUARD.set(guard)
    try:
        yield guard
    finally:
        _GUARD.reset(guard_token)
        _STAGE.reset(stage_token)


@contextmanager
def staged(stage: str) -> Iterator[None]:
    """Within the block, calls are recorded under ``stage`` unless a ``spending`` block named one already."""
    token = _STAGE.set(_STAGE.get() or stage)
    try:
        yield
    finally:
        _STAGE.reset(token)


def check_spend(projected_usd: float) -> None:
    """Hold ``projected_usd`` (a batch's upper bound) against the limit of the stage under way, or raise
    ``SpendLimitReached`` (nothing held) if it could pass it; no limit: nothing to do.

    A caller that sends what it checked calls ``settle_spend(projected_usd, paid_usd)`` when the results
    are in the ledger (or the batch ended)."""
    guard = _GUARD.get()
    if guard is not None and not guard.reserve(projected_usd):
        raise guard.error()


def settle_spend(projected_usd: float, paid_usd: float) -> None:
    """Release what ``check_spend(projected_usd)`` held, counting ``paid_usd`` as spent."""
    guard = _GUARD.get()
    if guard is not None:
        guard.settle(projected_usd, paid_usd)


JUDGE_STAGES = ("battles", "canaries", "difficulty", "moderation")
"""Stages whose calls are a judge's (``arena info``'s spend per judge)."""


def spend_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Return ``Store.spend_rows`` summed in all, per model (who asked), per stage and per judge.

    Each sum holds calls, batch_calls, tokens_in, tokens_out and usd; ``unpriced`` counts the calls recorded
    before the ledger kept prices (their tokens are counted, their USD not)."""
    def add(into: dict[str, Any], row: dict[str, Any]) -> None:
        into["calls"] += row["calls"]
        into["batch_calls"] += row["calls"] if row["batch"] else 0
        into["tokens_in"] += row["tokens_in"]
        into["tokens_out"] += row["tokens_out"]
        into["usd"] += row["usd"] or 0.0

    def blank() -> dict[str, Any]:
        return {"calls": 0, "batch_calls": 0, "tokens_in": 0, "tokens_out": 0, "usd": 0.0}

    total = blank()
    by: dict[str, dict[str, dict[str, Any]]] = {"by_model": {}, "by_stage": {}, "by_judge": {}}
    unpriced = 0
    for row in rows:
        stage = row["stage"] or "unknown"
        add(total, row)
        add(by["by_model"].setdefault(row["model"], blank()), row)
        add(by["by_stage"].setdefault(stage, blank()), row)
        if stage.split("/")[0] in JUDGE_STAGES:
            add(by["by_judge"].setdefault(row["model"], blank()), row)
        unpriced += row["calls"] if row["usd"] is None else 0
    for group in [total, *(g for sums in by.values() for g in sums.values())]:
        group["usd"] = round(group["usd"], 6)
    return {**total, "unpriced": unpriced, **by}
