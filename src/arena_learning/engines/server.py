"""``arena serve``: an OpenAI-compatible HTTP server over any configured engine.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions``. It lets a team share one local model, and it is the
real server the tests drive the ``openai`` engine against. It binds to
127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from .base import CallFailed, Engine, Request, RequestTooLarge

SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "seed", "stop")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def make_app(name: str, engine: Engine) -> web.Application:
    """Return the aiohttp application that serves ``engine`` as the model ``name``."""
    stats = {"requests": 0, "errors": 0}

    async def models(_: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "arena-learning"}]}
        )

    async def parse(req: web.Request, field_name: str) -> tuple[dict[str, Any] | None, web.Response | None]:
        try:
            body = json.loads(await req.read())
        except ValueError:
            return None, _error(400, "request body is not valid JSON")
        if not isinstance(body, dict) or field_name not in body:
            return None, _error(400, f"request body must be a JSON object with {field_name!r}")
        if body.get("model", name) != name:
            return None, _error(404, f"model {body.get('model')!r} not found; this server serves {name!r}", "not_found")
        return body, None

    def params_of(body: dict[str, Any]) -> dict[str, Any]:
        params = {k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None}
        if isinstance(params.get("stop"), str):
            params["stop"] = [params["stop"]]
        fmt = body.get("response_format")
        if isinstance(fmt, dict):
            # OpenAI's json_schema form, or llama.cpp's json_object with a schema, or plain JSON mode.
            schema = (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else fmt.get("schema")
            if schema is None and fmt.get("type") in ("json_object", "json_schema"):
                schema = {"type": "object"}
            if schema is not None:
                params["json_schema"] = schema
        return params

    async def run(request: Request) -> Any:
        stats["requests"] += 1
        try:
            return await engine.complete(request)
        except RequestTooLarge as err:
            stats["errors"] += 1
            return _error(400, str(err))
        except CallFailed as err:
            stats["errors"] += 1
            return _error(500, str(err), "server_error")

    async def chat(req: web.Request) -> web.Response:
        body, err = await parse(req, "messages")
        if err is not None:
            return err
        try:
            request = Request(messages=body["messages"], params=params_of(body))
        except ValidationError as exc:
            return _error(400, f"bad messages: {exc.errors()[0]['msg']}")
        out = await run(request)
        if isinstance(out, web.Response):
            return out
        return web.json_response(
            {
                "id": "chatcmpl-" + uuid.uuid4().hex[:16],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": out.text},
                        "finish_reason": out.finish_reason or "stop",
                    }
                ],
                "usage": _usage(out),
            }
        )

    async def completions(req: web.Request) -> web.Response:
        body, err = await parse(req, "prompt")
        if err is not None:
            return err
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return _error(400, "prompt must be a string (batched prompts are not supported)")
        out = await run(Request(prompt=prompt, params=params_of(body)))
        if isinstance(out, web.Response):
            return out
        return web.json_response(
            {
                "id": "cmpl-" + uuid.uuid4().hex[:16],
                "object": "text_completion",
                "created": int(time.time()),
                "model": name,
                "choices": [{"index": 0, "text": out.text, "finish_reason": out.finish_reason or "stop"}],
                "usage": _usage(out),
            }
        )

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **stats})

    app = web.Application(client_max_size=64 * 1024 * 1024)
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


def serve(name: str, engine: Engine, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``engine`` until interrupted."""
    web.run_app(make_app(name, engine), host=host, port=port, print=lambda msg: print(msg, flush=True))
