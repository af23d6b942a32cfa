"""``arena serve``: an OpenAI-compatible HTTP server over any configured engine.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions``. It lets a team share one local model, and it is the
real server the tests drive the ``openai`` engine against. It binds to
127.0.0.1 unless told otherwise, and can require a bearer token (the CLI requires
one beyond loopback). As every local server here (``httpd.Guard``): a Host that is
not the address served is a 403 (DNS rebinding), a POST that is not JSON a 415 (a
cross-site form or ``text/plain`` POST), and no answer grants CORS.

``stream: true`` answers as server-sent events, as OpenAI's API does (chunks, then a usage chunk
when ``stream_options.include_usage`` asks, then ``[DONE]``); concurrent requests share the
engine (llama.cpp decodes them in one batch). What the server cannot honour (``n`` > 1,
``logprobs``, tools, ``best_of``, ``echo``) is a 400 in OpenAI's error shape, never an answer
that silently ignores it.

``/health`` counts requests, errors and answers served whole (``ok``). The fault injector of the
reliability tests and benchmark (and of ``arena serve --faults``) is not part of the server: it is
a middleware that they install on its app (``engines.faults.install_faults``).
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from ..httpd import REFUSED_HOST, Guard, is_loopback
from .base import CallFailed, Completion, Engine, Request, RequestTooLarge

__all__ = ["STATS", "error_reply", "is_loopback", "make_app", "serve"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STATS = web.AppKey("stats", dict)
"""The app's counters, which ``/health`` reports: requests, errors, ok (served whole), faults (injected)."""

SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "seed", "stop")


def error_reply(status: int, message: str, kind: str = "invalid_request_error",
                param: str | None = None) -> web.Response:
    """Return an error reply in OpenAI's shape."""
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": status}},
                             status=status)


# Request fields this server cannot honour: (field, whether a value asks for it, what to say).
UNSUPPORTED: tuple[tuple[str, Any, str], ...] = (
    ("n", lambda v: v not in (None, 1), "n > 1 is not supported (one choice per request)"),
    ("best_of", lambda v: v not in (None, 1), "best_of is not supported"),
    ("logprobs", lambda v: v not in (None, False), "logprobs are not supported"),
    ("top_logprobs", lambda v: v is not None, "logprobs are not supported"),
    ("echo", lambda v: bool(v), "echo is not supported"),
    ("tools", lambda v: bool(v), "tools are not supported (the model cannot call functions)"),
    ("tool_choice", lambda v: v not in (None, "none"), "tools are not supported (the model cannot call functions)"),
    ("functions", lambda v: bool(v), "functions are not supported (the model cannot call functions)"),
    ("function_call", lambda v: v not in (None, "none"), "functions are not supported"),
)


def _unsupported(body: dict[str, Any]) -> web.Response | None:
    for key, asks, message in UNSUPPORTED:
        if asks(body.get(key)):
            return error_reply(400, f"{message}; got {key}={json.dumps(body.get(key))[:80]}", param=key)
    if body.get("stream") not in (None, False, True):
        return error_reply(400, "stream must be true or false", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return error_reply(400, "stream_options must be an object", param="stream_options")
    return None


def make_app(name: str | Sequence[str], engine: Engine, *, api_key: str | None = None,
             host: str = "127.0.0.1", allow_hosts: Sequence[str] = (), max_in_flight: int = 256) -> web.Application:
    """Return the aiohttp application that serves ``engine`` as the model ``name`` (or under each of several
    names, as vLLM's ``--served-model-name a b`` does; a reply names the model the request asked for).

    ``api_key``: every /v1 request must carry ``Authorization: Bearer <api_key>`` (else 401). ``host`` (the
    address it will be bound to) and ``allow_hosts``: the Host names it answers besides loopback's. A /v1 request
    beyond ``max_in_flight`` at once is a 503 with Retry-After (the engine queues those it takes). The counters
    that ``/health`` reports are ``app[STATS]`` (a fault injector, ``engines.faults``, adds its own there).
    """
    names = [name] if isinstance(name, str) else list(name)
    stats: dict[str, Any] = {"requests": 0, "errors": 0, "ok": 0, "faults": {}}
    expected = f"Bearer {api_key}".encode() if api_key else None
    hosts = Guard.bound_to(host, allow_hosts)
    in_flight = [0]

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not hosts.host_ok(request.headers.get("Host")):
            return error_reply(403, REFUSED_HOST, "permission_error")
        if request.method not in ("GET", "HEAD", "POST"):
            return error_reply(405, "this server takes GET and POST only (and grants no cross-origin use)")
        if request.method == "POST" and request.content_type != "application/json":
            return error_reply(415, "send JSON: Content-Type: application/json")
        if expected is not None and request.path.startswith("/v1/"):
            got = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(got, expected):
                return error_reply(401, "missing or wrong API key (Authorization: Bearer ...)", "authentication_error")
        if not request.path.startswith("/v1/"):
            return await handler(request)
        if in_flight[0] >= max_in_flight:
            busy = error_reply(503, f"more than {max_in_flight} requests at once: try again", "server_error")
            busy.headers["Retry-After"] = "1"
            return busy
        in_flight[0] += 1
        try:
            return await handler(request)
        finally:
            in_flight[0] -= 1

    async def models(_: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "arena-learning"}
                                        for n in names]}
        )

    async def parse(req: web.Request, field_name: str) -> tuple[dict[str, Any] | None, web.Response | None]:
        try:
            body = json.loads(await req.read())
        except ValueError:
            return None, error_reply(400, "request body is not valid JSON")
        if not isinstance(body, dict) or field_name not in body:
            return None, error_reply(400, f"request body must be a JSON object with {field_name!r}")
        if body.get("model", names[0]) not in names:
            served = ", ".join(map(repr, names))
            return None, error_reply(404, f"model {body.get('model')!r} not found; this server serves {served}",
                                     "not_found")
        refused = _unsupported(body)
        if refused is not None:
            return None, refused
        return body, None

    def params_of(body: dict[str, Any]) -> dict[str, Any]:
        params = {k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None}
        if body.get("max_completion_tokens") is not None and "max_tokens" not in params:
            params["max_tokens"] = body["max_completion_tokens"]  # what reasoning-model clients send
        if isinstance(params.get("stop"), str):
            params["stop"] = [params["stop"]]
        fmt = body.get("response_format")
        if isinstance(fmt, dict):
            # OpenAI's json_schema form, or llama.cpp's json_object with a schema, or plain JSON mode.
            schema = ((fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema"
                      else fmt.get("schema"))
            if schema is None and fmt.get("type") in ("json_object", "json_schema"):
                schema = {"type": "object"}
            if schema is not None:
                params["json_schema"] = schema
        return params

    def failure(err: CallFailed) -> web.Response:
        """The error reply of a call that failed: 400 for a request too large, else 500."""
        stats["errors"] += 1
        if isinstance(err, RequestTooLarge):
            return error_reply(400, str(err))
        return error_reply(500, str(err), "server_error")

    async def run(request: Request) -> Any:
        stats["requests"] += 1
        try:
            return await engine.complete(request)
        except CallFailed as err:
            return failure(err)

    async def answer(request: Request, *, chat: bool, model: str) -> web.Response:
        """Answer ``request`` whole: a chat.completion or a text_completion in OpenAI's shape."""
        out = await run(request)
        if isinstance(out, web.Response):
            return out
        stats["ok"] += 1
        finish = out.finish_reason or "stop"
        choice = ({"index": 0, "message": {"role": "assistant", "content": out.text}, "finish_reason": finish}
                  if chat else {"index": 0, "text": out.text, "finish_reason": finish})
        return web.json_response({
            "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16],
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": _usage(out),
        })

    async def chat(req: web.Request) -> web.StreamResponse:
        body, err = await parse(req, "messages")
        if err is not None or body is None:
            return err or error_reply(400, "no body")
        try:
            request = Request(messages=body["messages"], params=params_of(body))
        except ValidationError as exc:
            return error_reply(400, f"bad messages: {exc.errors()[0]['msg']}")
        if body.get("stream"):
            return await stream(req, body, request, chat=True)
        return await answer(request, chat=True, model=body.get("model", names[0]))

    async def completions(req: web.Request) -> web.StreamResponse:
        body, err = await parse(req, "prompt")
        if err is not None or body is None:
            return err or error_reply(400, "no body")
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return error_reply(400, "prompt must be a string (batched prompts are not supported)")
        request = Request(prompt=prompt, params=params_of(body))
        if body.get("stream"):
            return await stream(req, body, request, chat=False)
        return await answer(request, chat=False, model=body.get("model", names[0]))

    async def stream(req: web.Request, body: dict[str, Any], request: Request, *, chat: bool) -> web.StreamResponse:
        """Answer ``request`` as server-sent events: OpenAI's chunks, the usage chunk if asked, ``[DONE]``."""
        stats["requests"] += 1
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16],
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": body.get("model", names[0])}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any] | str | None, finish: str | None = None) -> bytes:
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
            data: dict[str, Any] = {**head, "choices": [choice]}
            if include_usage:
                data["usage"] = None
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        parts = engine.stream(request)
        # The first piece decides between an error reply (nothing sent yet) and a stream.
        try:
            first = await parts.__anext__()
        except CallFailed as err:
            return failure(err)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(req)
        if chat:
            await resp.write(chunk({"role": "assistant", "content": ""}))
        try:
            part: Any = first
            while not isinstance(part, Completion):
                await resp.write(chunk({"content": part} if chat else part))
                part = await parts.__anext__()
        except CallFailed as err:
            stats["errors"] += 1
            error = {"error": {"message": str(err), "type": "server_error", "param": None, "code": 500}}
            await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            await resp.write_eof()
            return resp
        finally:
            await parts.aclose()
        await resp.write(chunk({} if chat else "", part.finish_reason or "stop"))
        if include_usage:
            await resp.write(b"data: " + json.dumps({**head, "choices": [], "usage": _usage(part)}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        stats["ok"] += 1
        return resp

    async def health(_: web.Request) -> web.Response:
        batch = getattr(engine, "batch_stats", None)  # llama.cpp: how the requests were batched
        return web.json_response({"status": "ok", **stats, **({"batch": batch()} if callable(batch) else {})})

    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[guard])
    app[STATS] = stats
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    return app


def _usage(out: Any) -> dict[str, int]:
    return {
        "prompt_tokens": out.tokens_in,
        "completion_tokens": out.tokens_out,
        "total_tokens": out.tokens_in + out.tokens_out,
    }


def serve(app: web.Application, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``app`` (``make_app``'s, with whatever middleware was installed on it) until interrupted."""
    # an idle connection is closed after 75 s (aiohttp's default keeps one an hour)
    web.run_app(app, host=host, port=port, keepalive_timeout=75, print=lambda msg: print(msg, flush=True))
