"""Any OpenAI-compatible endpoint: vLLM, SGLang, TGI, llama.cpp server, Ollama, hosted APIs.

The client is aiohttp with one session per event loop and one connection pool
per endpoint. Measured on this 2-core machine, a plain ``AsyncOpenAI`` loop
peaks near 400 requests/s and raw httpx drops to 100-300/s beyond 32
connections, while aiohttp sustains thousands; the arena sends tens of
thousands of short judge calls, so the client's own CPU time is what bounds it.

Several base URLs for one model spread the load: each request goes to the
endpoint with the fewest requests in flight. 429 (honouring Retry-After), 5xx,
timeouts and connection errors are retried with exponential backoff and full
jitter; other 4xx are the caller's mistake and fail at once.

A reply's latency is measured from the moment its request is sent, not from
when it started waiting for one of the endpoint's ``concurrency`` slots. A
``content: null`` reply becomes empty text, which the ledger road
(``engines.calls``) records as a failed call, never as an answer.

``rpm`` and ``tpm`` limit each endpoint's requests and tokens per minute
(``engines.ratelimit``): a request waits for them once it holds a concurrency
slot, right before it is sent, so the rate holds at the server. A reply's
``reasoning_content`` (or ``reasoning``) is kept apart from its answer
(``engines.reasoning``); ``max_tokens_field: max_completion_tokens`` sends the
limit as reasoning models want it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import TYPE_CHECKING, Any

from ..config import ModelSpec
from ..errors import EngineError
from .base import CallFailed, Completion, Engine, Request, completion_stops, render_completion_prompt
from .ratelimit import EndpointLimits, estimate_tokens

if TYPE_CHECKING:
    import aiohttp

# aiohttp (about 0.1 s to import) is imported when a request is first sent, not when the engine is built: a
# rerun whose calls are all in the ledger (and `arena plan`) builds the engine and sends nothing.

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Endpoint:
    def __init__(self, base_url: str, limit: int, rpm: int | None = None, tpm: int | None = None):
        self.base_url = base_url.rstrip("/")
        self.limit = limit
        self.in_flight = 0
        self.sem: asyncio.Semaphore | None = None
        self.rates = EndpointLimits(rpm, tpm)


class OpenAIEngine(Engine):
    kind = "openai"

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.endpoints = [_Endpoint(u, spec.concurrency, spec.rpm, spec.tpm) for u in spec.base_urls]
        self.api_key: str | None = None
        if spec.api_key_env:
            self.api_key = os.environ.get(spec.api_key_env)
            if not self.api_key:
                raise EngineError(
                    f"model {spec.name!r}: the environment variable {spec.api_key_env} (api_key_env) is not set; "
                    f"export it with the API key"
                )
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.retries = 0

    @property
    def concurrency(self) -> int:
        return sum(e.limit for e in self.endpoints)

    def _get_session(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            # Sessions and semaphores belong to one event loop; a new loop (a new stage) gets new ones.
            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            # No pool limits: the per-endpoint semaphores bound the load, and a pool limit shared by
            # endpoints on one host would queue requests inside the timeout.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.spec.timeout_s),
                json_serialize=json.dumps,
            )
            self._loop = loop
            for e in self.endpoints:
                e.sem = asyncio.Semaphore(e.limit)
                e.in_flight = 0
        return self._session

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def key_params(self, request: Request) -> dict[str, Any]:
        params = super().key_params(request)
        if self.spec.max_tokens_field != "max_tokens":
            # Only when set, so that the keys of every existing workspace stay as they were.
            params["max_tokens_field"] = self.spec.max_tokens_field
        return params

    def _body(self, request: Request) -> tuple[str, dict[str, Any]]:
        params = {**self.default_params(), **request.params}
        body: dict[str, Any] = {
            "model": self.spec.model,
            self.spec.max_tokens_field: params.pop("max_tokens"),
            "temperature": params.pop("temperature"),
            "top_p": params.pop("top_p"),
            "seed": params.pop("seed"),
        }
        stop = params.pop("stop")
        schema = params.pop("json_schema", None)
        if schema is not None:
            # Structured output, as vLLM, SGLang, llama.cpp server and OpenAI accept it.
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}}
        body.update(params)
        if request.messages is not None and self.spec.mode == "chat":
            path = "/chat/completions"
            body["messages"] = request.messages
        else:
            path = "/completions"
            if request.messages is not None:
                body["prompt"] = render_completion_prompt(self.spec.prompt_format, request.messages)
                stop = completion_stops(self.spec.prompt_format, stop)
            else:
                body["prompt"] = request.prompt
        if stop:
            body["stop"] = stop
        return path, body

    @staticmethod
    def _encode(body: dict[str, Any], request: Request) -> bytes:
        """Return ``body`` as JSON bytes, encoded once for every attempt.

        Chat messages are spliced in from the request's canonical payload JSON, which its ledger key was
        made of: a judge prompt (the largest part of a call) is encoded once, not once more for the wire.
        """
        if body.get("messages") is not None and body["messages"] is request.messages:
            head = json.dumps({k: v for k, v in body.items() if k != "messages"}, ensure_ascii=False)
            return f"{head[:-1]},{request.payload_json()[1:]}".encode()
        return json.dumps(body, ensure_ascii=False).encode()

    def wire(self, request: Request) -> tuple[str, bytes]:
        """Return the path under the base URL (``/chat/completions`` or ``/completions``) and the JSON body that
        ``complete`` sends for ``request``: a batch job's line holds the same (``engines.batch``)."""
        path, body = self._body(request)
        return path, self._encode(body, request)

    def reading(self) -> dict[str, bool]:
        """Return how a reply's body is read back into a Completion (``parse_completion``'s settings)."""
        return {"strip": self.spec.mode == "completion" and self.spec.prompt_format.strip_answer}

    async def complete(self, request: Request) -> Completion:
        import aiohttp

        path, body = self._body(request)
        estimate = estimate_tokens(body, body[self.spec.max_tokens_field])
        data = self._encode(body, request)
        session = self._get_session()
        last_error = ""
        for attempt in range(self.spec.max_retries + 1):
            endpoint = min(self.endpoints, key=lambda e: e.in_flight)
            endpoint.in_flight += 1
            retry_after: float | None = None
            try:
                assert endpoint.sem is not None
                async with endpoint.sem:
                    # Wait for the rate limits holding the slot: taken before it, the tokens would be
                    # spent while the request still queues, and the requests would burst out later.
                    taken = await endpoint.rates.acquire(estimate)
                    # Latency runs from the moment the request is sent: the waits for a slot and for
                    # the rate limits above are this client's queue, not the model's time.
                    start = time.perf_counter()
                    async with session.post(endpoint.base_url + path, data=data) as resp:
                        raw = await resp.read()
                        if resp.status == 200:
                            try:
                                comp = self._parse(raw, path, time.perf_counter() - start, endpoint.base_url)
                                endpoint.rates.settle(taken, comp.tokens_in + comp.tokens_out)
                                return comp
                            except CallFailed as err:  # a mangled body (cut off, not JSON, no choices): ask again
                                last_error = str(err)
                                raise _Malformed from None
                        reply = raw[:300].decode("utf-8", "replace")
                        last_error = f"HTTP {resp.status} from {endpoint.base_url}{path}: {reply}"
                        if resp.status not in RETRY_STATUS:
                            raise CallFailed(last_error)
                        retry_after = _retry_after(resp.headers.get("Retry-After"))
            except _Malformed:
                pass
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                last_error = f"{type(err).__name__} talking to {endpoint.base_url}: {err}"
            finally:
                endpoint.in_flight -= 1
            if attempt < self.spec.max_retries:
                self.retries += 1
                # Full jitter keeps many clients that failed together from retrying together.
                delay = retry_after if retry_after is not None else random.uniform(0, min(30.0, 0.25 * 2**attempt))
                await asyncio.sleep(delay)
        raise CallFailed(f"gave up after {self.spec.max_retries + 1} attempts: {last_error}")

    def _parse(self, raw: bytes, path: str, latency: float, base_url: str) -> Completion:
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise CallFailed(f"malformed response from {base_url}{path}: {raw[:200]!r}") from err
        try:
            return parse_completion(data, chat=path == "/chat/completions", latency=latency, **self.reading())
        except CallFailed:
            raise CallFailed(f"malformed response from {base_url}{path}: {raw[:200]!r}") from None


def parse_completion(data: Any, *, chat: bool, strip: bool = False, latency: float = 0.0) -> Completion:
    """Return the Completion in a chat/completions (``chat``) or completions reply's decoded JSON body; CallFailed
    when it holds none. ``strip``: strip whitespace around the text (a completion-mode model's answer)."""
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
    except (KeyError, IndexError, TypeError) as err:
        raise CallFailed(f"a reply with no completion in it: {json.dumps(data)[:200]}") from err
    usage = data.get("usage") or {}
    message = choice.get("message") or {}
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    details = usage.get("completion_tokens_details") or {}
    if strip and text:
        text = text.strip()
    return Completion(
        text=text or "",
        tokens_in=usage.get("prompt_tokens", 0) or 0,
        tokens_out=usage.get("completion_tokens", 0) or 0,
        latency_s=latency,
        finish_reason=choice.get("finish_reason"),
        reasoning=reasoning if isinstance(reasoning, str) else json.dumps(reasoning),
        reasoning_tokens=details.get("reasoning_tokens", 0) or 0,
    )


class _Malformed(Exception):
    """A 200 whose body is not a completion: retried like a 5xx."""


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(max(float(value), 0.0), 120.0)
    except ValueError:
        return None
