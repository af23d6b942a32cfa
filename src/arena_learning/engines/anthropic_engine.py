"""Anthropic's Messages API through the official ``anthropic`` SDK (the ``anthropic`` extra).

A chat request becomes one ``POST /v1/messages``: system messages go to the ``system`` parameter, the
user and assistant turns to ``messages``, with ``max_tokens`` and ``stop_sequences``. The sampling
settings are sent only where they differ from the API's defaults (``temperature`` 1, ``top_p`` 1), in
the request body as the SDK's ``extra_body`` (SDK 1.0 dropped them from its signature; the wire format
is unchanged): a model that takes no sampling settings is used with ``temperature: 1.0``. The SDK retries
429, 529 (overloaded), 5xx, timeouts and connection errors with backoff, honouring ``retry-after``,
``max_retries`` times; what still fails is a failed call, retried on the next run. ``seed`` and a
judge's ``json_schema`` have no Messages API field: they are not sent (the judge's parser reads the
verdict from the text, as it does for any endpoint) but stay in the ledger key like every param.

Usage is the server's own count: ``input_tokens`` (with the prompt cache's reads and writes, which are
input too) and ``output_tokens``; a reply stopped at ``max_tokens`` is ``finish_reason: length`` as an
OpenAI one is; ``thinking`` blocks are the reply's reasoning, kept apart from its text.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from ..config import ModelSpec
from ..errors import EngineError
from .base import CallFailed, Completion, Engine, Request

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

DEFAULT_KEY_ENV = "ANTHROPIC_API_KEY"
FINISH = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}
"""Anthropic's stop_reason as the ledger's finish_reason (OpenAI's names; others are kept as they are)."""


class AnthropicEngine(Engine):
    kind = "anthropic"

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        if spec.mode != "chat":
            raise EngineError(f"model {spec.name!r}: the Messages API takes chat messages: set mode: chat")
        try:
            import anthropic  # noqa: F401  # the extra: say what to install before any call
        except ImportError:
            raise EngineError(f"model {spec.name!r}: engine 'anthropic' needs the anthropic package: "
                              "pip install 'arena-learning[anthropic]'") from None
        env = spec.api_key_env or DEFAULT_KEY_ENV
        self.api_key = os.environ.get(env)
        if not self.api_key:
            if spec.api_key_env or spec.base_url is None:  # a hosted API without its key
                raise EngineError(f"model {spec.name!r}: the environment variable {env} is not set; export it with "
                                  f"the API key")
            self.api_key = "unused"  # a local stand-in asks for none
        self._client: AsyncAnthropic | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sem: asyncio.Semaphore | None = None

    @property
    def concurrency(self) -> int:
        return self.spec.concurrency

    def _get_client(self) -> tuple[AsyncAnthropic, asyncio.Semaphore]:
        from anthropic import AsyncAnthropic

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._sem is None:
            # A client's connections belong to one event loop; a new loop (a new stage) gets a new client.
            base = self.spec.base_urls[0] if self.spec.base_urls else None
            self._client = AsyncAnthropic(api_key=self.api_key, base_url=base, max_retries=self.spec.max_retries,
                                          timeout=self.spec.timeout_s)
            self._loop = loop
            self._sem = asyncio.Semaphore(self.spec.concurrency)
        return self._client, self._sem

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
        self._client = None

    def body(self, request: Request) -> dict[str, Any]:
        """Return the SDK's ``messages.create`` arguments for ``request``."""
        if request.messages is None:
            raise CallFailed(f"model {self.spec.name!r}: the Messages API takes chat messages, not a raw prompt")
        params = {**self.default_params(), **request.params}
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        body: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": int(params["max_tokens"]),
            "messages": [{"role": m["role"], "content": m["content"]} for m in request.messages
                         if m["role"] != "system"],
        }
        sampling = {k: float(params[k]) for k in ("temperature", "top_p") if float(params.get(k, 1.0)) != 1.0}
        if sampling:
            body["extra_body"] = sampling
        if system:
            body["system"] = system
        if params.get("stop"):
            body["stop_sequences"] = list(params["stop"])
        return body

    async def complete(self, request: Request) -> Completion:
        import anthropic

        body = self.body(request)
        client, sem = self._get_client()
        async with sem:
            start = time.perf_counter()
            try:
                reply = await client.messages.create(**body)
            except anthropic.APIStatusError as err:
                raise CallFailed(f"HTTP {err.status_code} from Anthropic ({self.spec.model}): {err.message}"[:500]) \
                    from None
            except anthropic.APIError as err:  # connection errors and timeouts, after the SDK's retries
                raise CallFailed(f"{type(err).__name__} talking to Anthropic ({self.spec.model}): {err}"[:500]) \
                    from None
            latency = time.perf_counter() - start
        return message_completion(reply.model_dump(), latency)


def message_completion(message: dict[str, Any], latency_s: float = 0.0) -> Completion:
    """Return the Completion of a Messages API reply (a ``Message`` as JSON: a synchronous reply's, or a Message
    Batches result's): its text blocks, its thinking blocks as reasoning, its usage and stop reason."""
    blocks = message.get("content") or []
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text")
    reasoning = "".join(b.get("thinking") or "" for b in blocks if b.get("type") == "thinking")
    usage = message.get("usage") or {}
    tokens_in = sum(usage.get(k) or 0 for k in ("input_tokens", "cache_creation_input_tokens",
                                                "cache_read_input_tokens"))
    stop = message.get("stop_reason")
    return Completion(text=text, tokens_in=tokens_in, tokens_out=usage.get("output_tokens") or 0, latency_s=latency_s,
                      finish_reason=FINISH.get(stop, stop) if stop is not None else None, reasoning=reasoning)
