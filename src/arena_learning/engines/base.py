"""The engine interface: submit many requests, get completions back.

An engine turns a :class:`Request` into a :class:`Completion`. Engines own
concurrency (how many requests are in flight, retries); stages never do. Every
call goes through the ledger (``engines.calls``), never to an engine directly.
"""

from __future__ import annotations

import abc
import asyncio
import os
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from ..config import ModelSpec, PromptFormat
from ..store import canonical_json


class Request(BaseModel):
    """One completion request: chat messages or a raw prompt, and sampling params."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_of(self) -> Request:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("a Request has either messages or prompt, not both or neither")
        return self

    # payload_json's cache: the payload is the largest part of a call and is encoded once, for the ledger
    # key, the HTTP body and the ledger row alike (a Request is not changed once built; model_copy resets it)
    _payload_json: str | None = PrivateAttr(default=None)

    def payload(self) -> dict[str, Any]:
        return {"messages": self.messages} if self.messages is not None else {"prompt": self.prompt}

    def payload_json(self) -> str:
        """Return ``payload()`` as the ledger's canonical JSON (``store.canonical_json``), encoded once."""
        if self._payload_json is None:
            self._payload_json = canonical_json(self.payload())
        return self._payload_json

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Request:
        copy = super().model_copy(update=update, deep=deep)
        copy._payload_json = None  # the copy may hold other messages
        return copy


class Completion(BaseModel):
    """What came back: the text, token counts and how long it took.

    ``text`` is the answer only; a reasoning model's thinking is in ``reasoning`` (see
    ``engines.reasoning``), and its tokens, counted in ``tokens_out`` too, in ``reasoning_tokens``.
    """

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    reasoning: str = ""
    reasoning_tokens: int = 0


class CallFailed(Exception):
    """A request that failed after its retries; the ledger records the message."""


class RequestTooLarge(CallFailed):
    """The request cannot succeed as it is (e.g. longer than the context window): retrying is pointless."""


class Engine(abc.ABC):
    """Runs one ModelSpec. ``kind`` and ``model_id`` name it in the ledger key."""

    kind: str = "base"
    in_process: bool = False  # the model runs in this process (no server between us and the weights)
    # True while a caller runs several batches on one event loop and closes the engine itself
    # (arena.judges.judge_session: a stage's games and canaries on one HTTP session); else each
    # batch of ``arun_requests`` closes it when done
    keep_open: bool = False

    def __init__(self, spec: ModelSpec):
        self.spec = spec

    @property
    def model_id(self) -> str:
        """The model's identity in the ledger: its id, and the user-set revision of its weights if any."""
        return f"{self.spec.model}@{self.spec.revision}" if self.spec.revision else self.spec.model

    @property
    def concurrency(self) -> int:
        """How many requests the caller should keep in flight."""
        return 1

    @property
    def in_flight(self) -> int:
        """How many calls the caller may have started at once (queued in the engine included)."""
        # Twice the concurrency keeps remote endpoints busy while results are written.
        return 2 * self.concurrency

    def repeatable(self, request: Request) -> bool:
        """Whether asking again can only give the same completion: an in-process model, greedy or seeded.

        An endpoint can answer differently at any temperature (a glitch, a restarted server), so
        only in-process engines are repeatable: at temperature 0, or sampling with a seed (the
        engines seed each sampled request alone, so a seeded sample repeats whatever runs beside
        it; the flywheel's own samples, ``harvest.samples``, rely on it).
        """
        params = {**self.default_params(), **request.params}
        return self.in_process and (float(params.get("temperature", 1.0)) == 0.0 or params.get("seed") is not None)

    def default_params(self) -> dict[str, Any]:
        """Return the spec's sampling params, which a request's own params override."""
        return self.spec.params.model_dump()

    def key_params(self, request: Request) -> dict[str, Any]:
        """Return everything besides the messages that changes this call's output."""
        params = {**self.default_params(), **request.params}
        if self.spec.mode == "completion" and request.messages is not None:
            params["prompt_format"] = self.spec.prompt_format.model_dump()
        if self.spec.mode == "chat":
            params["chat"] = self.spec.chat_template or self.spec.chat_format
        return params

    @abc.abstractmethod
    async def complete(self, request: Request) -> Completion:
        """Return the completion of ``request``; raise CallFailed when it cannot."""

    async def stream(self, request: Request) -> AsyncGenerator[str | Completion, None]:
        """Yield the completion's text in pieces as it is generated, then the :class:`Completion` itself.

        The pieces add up to the completion's text. By default the whole text comes at once; an
        engine that decodes token by token (llama.cpp) yields as it goes.
        """
        out = await self.complete(request)
        if out.text:
            yield out.text
        yield out

    def expect(self, requests: Sequence[Request]) -> None:  # noqa: B027 - optional hook
        """Hear the list of requests the caller is about to send, in the order it sends them.

        An engine whose batches depend on when requests arrive (llama.cpp's batcher) uses it to batch
        by the list's order instead, so the same list gets the same answers; the others ignore it.
        """

    def expect_done(self) -> None:  # noqa: B027 - optional hook
        """The caller sends nothing more of what it announced with ``expect`` (it finished, or failed)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections or models."""


class BatchedEngine(Engine):
    """An in-process engine that answers queued requests in batches, one batch at a time on ``worker``.

    ``complete`` queues a request; one drain task on the event loop takes a batch (``take_batch``:
    by default everything queued) and runs ``generate_batch`` on the worker thread. Failures reach
    every caller of the batch.
    """

    worker: Any = None  # a ThreadPoolExecutor with one thread: the model is used by one thread only

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self._pending: list[tuple[Request, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None

    async def complete(self, request: Request) -> Completion:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._pending.append((request, fut))
        if self._drainer is None or self._drainer.done() or self._drainer.get_loop() is not loop:
            self._drainer = loop.create_task(self._drain())
        return await fut

    def take_batch(self) -> list[tuple[Request, asyncio.Future]]:
        """Remove and return the next batch of queued requests (default: all of them)."""
        batch, self._pending = self._pending, []
        return batch

    @abc.abstractmethod
    def generate_batch(self, requests: list[Request]) -> list[Completion | BaseException]:
        """Return a completion or the exception of each request; run on ``worker``."""

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            # Let the callers that are about to queue a request do so, so batches fill up.
            for _ in range(3):
                await asyncio.sleep(0)
            batch = self.take_batch()
            try:
                results: list[Any] = await loop.run_in_executor(self.worker, self.generate_batch,
                                                                [r for r, _ in batch])
            except Exception as err:  # any error: every caller of the batch must hear of it
                failure = err if isinstance(err, CallFailed) else CallFailed(f"{self.kind}: {err!r}")
                results = [failure] * len(batch)
            for (_, fut), res in zip(batch, results):
                if not fut.done():
                    (fut.set_exception if isinstance(res, BaseException) else fut.set_result)(res)


def available_cores() -> int:
    """Return the cores this process may run on (its CPU affinity: a cpuset, ``taskset``), not the machine's.

    A local engine's default thread count: in a container pinned to 4 of a host's 64 cores, 64 threads would take
    turns on 4. (A batched answer does not depend on the thread count: tests/test_llamacpp_batched.py.)
    """
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - macOS and Windows have no affinity call
        return os.cpu_count() or 1


def render_completion_prompt(fmt: PromptFormat, messages: list[dict[str, str]]) -> str:
    """Return the text a base model continues: few-shot examples, then the conversation.

    The conversation must end with a user turn; the text ends with the
    assistant prefix so the model writes the next answer.
    """
    if not messages or messages[-1].get("role") != "user":
        raise ValueError("a completion prompt needs a conversation that ends with a user turn")
    parts: list[str] = []
    system = fmt.system
    for m in messages:
        if m["role"] == "system":
            system = m["content"]
    if system:
        parts.append(system)
    for question, answer in fmt.few_shot:
        parts.append(f"{fmt.user_prefix}{question}{fmt.user_suffix}"
                     f"{fmt.assistant_prefix} {answer}{fmt.assistant_suffix}")
    for m in messages:
        if m["role"] == "user":
            parts.append(f"{fmt.user_prefix}{m['content']}{fmt.user_suffix}")
        elif m["role"] == "assistant":
            parts.append(f"{fmt.assistant_prefix} {m['content']}{fmt.assistant_suffix}")
    parts.append(fmt.assistant_prefix)
    return "".join(parts)


def completion_stops(fmt: PromptFormat, stop: list[str]) -> list[str]:
    """Return the stop strings of a completion-mode model: its own plus the next user turn."""
    stops = list(stop)
    marker = fmt.user_prefix.strip()
    if marker and marker not in stops:
        stops.append(marker)
    return stops

