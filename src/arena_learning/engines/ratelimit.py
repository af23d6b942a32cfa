"""Requests per minute and tokens per minute, per endpoint: token buckets the openai engine waits on.

Hosted APIs limit both, and enforce them in short quanta (a 600 RPM limit turns away the 11th
request of one second): concurrency alone cannot keep a fast endpoint under them, and 429s
waste the budget. Each endpoint gets a bucket that refills continuously:

- requests: ``rpm / 60`` per second, holding at most a tenth of a second's share (at least
  one request), so requests go out evenly and any second holds at most ``rpm / 60`` plus that;
- tokens: ``tpm / 60`` per second, holding at most one second's share. A request is charged
  its prompt (estimated at 4 characters a token) plus its ``max_tokens`` before it is sent (as
  OpenAI counts it), and the difference to what the reply's usage says is refunded or charged
  after it. A request larger than the bucket waits for a full bucket and leaves it in debt,
  which the requests after it wait out: over time the rate holds whatever the sizes.

aiolimiter's leaky bucket does the waiting but cannot refund or charge after the call, which
TPM needs; hence this small bucket. Waiters are served first come, first served.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any


class TokenBucket:
    """A bucket of ``capacity`` units that refills at ``rate`` units per second; starts full."""

    def __init__(self, rate: float, capacity: float):
        if rate <= 0 or capacity <= 0:
            raise ValueError("a token bucket needs a positive rate and capacity")
        self.rate = rate
        self.capacity = capacity
        self.level = capacity
        self.stamp = time.monotonic()
        self._lock: asyncio.Lock | None = None
        self._refunded: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    async def acquire(self, amount: float = 1.0) -> float:
        """Wait until ``amount`` units (or a full bucket, if more) are in the bucket, take ``amount``, return it."""
        need = min(amount, self.capacity)
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            # Locks and events belong to one event loop.
            self._lock, self._refunded, self._loop = asyncio.Lock(), asyncio.Event(), loop
        assert self._refunded is not None
        async with self._lock:  # first come, first served: a large request is not starved by small ones
            while True:
                self._refill()
                if self.level >= need:
                    self.level -= amount  # below zero for a request larger than the bucket: a debt
                    return amount
                # Wait for the refill, or less if a reply gives back what its estimate took too much.
                self._refunded.clear()
                try:
                    await asyncio.wait_for(self._refunded.wait(), (need - self.level) / self.rate)
                except asyncio.TimeoutError:
                    pass

    def adjust(self, amount: float) -> None:
        """Give back ``amount`` units (negative: take more, into debt that later waiters pay off)."""
        self._refill()
        self.level = min(self.capacity, self.level + amount)
        if amount > 0 and self._refunded is not None and self._loop is _running_loop():
            self._refunded.set()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def estimate_tokens(body: dict[str, Any], max_tokens: int) -> int:
    """Return what a request body may cost in tokens: its prompt (4 characters a token) plus ``max_tokens``."""
    if "messages" in body:
        chars = sum(len(m.get("content") or "") + 8 for m in body["messages"])  # 8: each message's framing
    else:
        prompt = body.get("prompt", "")
        chars = len(prompt if isinstance(prompt, str) else json.dumps(prompt))
    return math.ceil(chars / 4) + max_tokens


class EndpointLimits:
    """The request and token buckets of one endpoint (either may be absent)."""

    def __init__(self, rpm: int | None, tpm: int | None):
        self.requests = TokenBucket(rpm / 60.0, max(1.0, rpm / 600.0)) if rpm else None
        self.tokens = TokenBucket(tpm / 60.0, tpm / 60.0) if tpm else None

    async def acquire(self, tokens: int) -> float:
        """Wait for a request slot and ``tokens`` tokens; return the tokens taken."""
        if self.requests is not None:
            await self.requests.acquire(1.0)
        return await self.tokens.acquire(tokens) if self.tokens is not None else 0.0

    def settle(self, taken: float, used: int) -> None:
        """Correct the token bucket once the reply's usage says what the request cost (``taken`` was charged)."""
        if self.tokens is not None and used > 0:
            self.tokens.adjust(taken - used)
