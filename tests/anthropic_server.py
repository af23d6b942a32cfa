"""A local stand-in for Anthropic's Messages API and its Message Batches endpoints, on 127.0.0.1.

A hosted API cannot be reached from the tests, so this double follows the published API reference and the
official ``anthropic`` SDK's types (``types.Message``, ``types.messages.MessageBatch``,
``MessageBatchIndividualResponse``; the tests drive it with that SDK):

- ``POST /v1/messages``: checks a request as the API does (an API key and ``anthropic-version``, model and
  max_tokens, a system string, turns that alternate from a user turn) and answers ``script(body)`` as a Message.
- ``POST /v1/messages/batches`` (``requests``: at most 100,000 ``{custom_id, params}``, custom_id
  ``^[a-zA-Z0-9_-]{1,64}$`` and unique, 256 MB at most); ``GET /v1/messages/batches/{id}``; ``GET
  /v1/messages/batches/{id}/results`` (JSONL, once the batch has ended, in another order than the requests');
  ``POST /v1/messages/batches/{id}/cancel``; ``GET /v1/messages/batches?limit&after_id&before_id`` (newest
  first). A batch is ``in_progress`` -> (``canceling`` ->) ``ended``; its ``request_counts`` are all
  ``processing`` until it ends, as the API's are. Each request's params are answered by the same logic as
  ``POST /v1/messages`` (a params the API would refuse is an ``errored`` result, as the API validates params
  asynchronously); a batch ``expire_after`` requests in expires the rest; a cancelled one cancels what is left.

What the tests assert on: ``created`` (batches created), ``sent`` (each request's params or body answered, by
its canonical JSON: answered twice is paid twice), ``duplicates``. ``hold()`` keeps every batch in progress with
no request answered until ``release()``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from .conftest import Reply, ThreadServer

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024


def _error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(_error_body(kind, message), status=status)


def _canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def invalid(body: dict[str, Any]) -> str | None:
    """Return why the Messages API would refuse ``body`` (400 invalid_request_error), or None."""
    if not isinstance(body.get("model"), str) or not isinstance(body.get("max_tokens"), int):
        return "model and max_tokens are required"
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        return "messages: the first message must use the user role"
    roles = [m.get("role") for m in messages]
    if any(r not in ("user", "assistant") for r in roles) or any(a == b for a, b in itertools.pairwise(roles)):
        return "messages: roles must alternate between user and assistant"
    if "system" in body and not isinstance(body["system"], str):
        return "system: a string"
    if "temperature" in body and "top_p" in body:
        return "temperature and top_p cannot both be specified for this model"
    return None


class MessagesServer:
    """Anthropic's Messages and Message Batches endpoints: ``script(body)`` gives a reply (text, or a conftest
    Reply with its status, finish and usage). Records every synchronous request's body and headers.

    ``concurrency``: requests of one batch answered at once; ``expire_after``: a batch expires once that many of
    its requests are answered."""

    def __init__(self, script, *, concurrency: int = 8, expire_after: int | None = None):
        self.script = script
        self.concurrency, self.expire_after = concurrency, expire_after
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[Any] = []
        self.sent: Counter[str] = Counter()
        self.batches: dict[str, dict[str, Any]] = {}  # in creation order
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.created = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.tasks: set[asyncio.Task] = set()
        app = web.Application(client_max_size=MAX_BYTES)
        app.router.add_post("/v1/messages", self._handle)
        app.router.add_post("/v1/messages/batches", self.create)
        app.router.add_get("/v1/messages/batches", self.list)
        app.router.add_get("/v1/messages/batches/{id}", self.retrieve)
        app.router.add_get("/v1/messages/batches/{id}/results", self.results_file)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self.cancel)
        self.server = ThreadServer(app)
        self.base_url = f"http://127.0.0.1:{self.server.port}"

    # ---- what the tests read and steer --------------------------------------------------------------------
    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.sent.values() if n > 1)

    def counts(self) -> dict[str, int]:
        return {"created": self.created, "requests": sum(self.sent.values()), "duplicates": self.duplicates}

    def hold(self) -> None:
        """Keep every batch in progress, no request answered, until ``release``."""
        self.server.loop.call_soon_threadsafe(self.gate.clear)

    def release(self) -> None:
        self.server.loop.call_soon_threadsafe(self.gate.set)

    def close(self) -> None:
        self.release()
        self.server.close()

    # ---- the Messages API ---------------------------------------------------------------------------------
    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer one Messages request: (HTTP status, a Message or an error body)."""
        self.sent[_canonical(body)] += 1
        why = invalid(body)
        if why is not None:
            return 400, _error_body("invalid_request_error", why)
        reply = self.script(body)
        reply = reply if isinstance(reply, Reply) else Reply(content=reply)
        if reply.status != 200:
            kind = "overloaded_error" if reply.status == 529 else "api_error"
            return reply.status, _error_body(kind, reply.error)
        tokens_in, tokens_out = reply.usage or (len(json.dumps(body["messages"])) // 4, 9)
        stop = {"length": "max_tokens", "stop": "end_turn"}[reply.finish]
        return 200, {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                     "model": body["model"], "content": [{"type": "text", "text": reply.content or ""}],
                     "stop_reason": stop, "stop_sequence": None,
                     "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}

    @staticmethod
    def _unauthorized(request: web.Request) -> web.Response | None:
        key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        if not key or not request.headers.get("anthropic-version"):
            return _error(401, "authentication_error", "an API key (x-api-key or a bearer token) and the "
                          "anthropic-version header are required")
        return None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.headers.append(request.headers.copy())
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        status, payload = self.answer(body)
        return web.json_response(payload, status=status)

    # ---- Message Batches ----------------------------------------------------------------------------------
    async def create(self, request: web.Request) -> web.Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        body = await request.json()
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return _error(400, "invalid_request_error", "requests: a list of at least one request")
        if len(requests) > MAX_REQUESTS:
            return _error(400, "invalid_request_error", f"requests: at most {MAX_REQUESTS} per batch")
        seen: set[str] = set()
        for i, item in enumerate(requests):
            cid = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(cid, str) or not CUSTOM_ID.match(cid):
                return _error(400, "invalid_request_error", f"requests.{i}.custom_id: must match "
                              f"^[a-zA-Z0-9_-]{{1,64}}$")
            if cid in seen:
                return _error(400, "invalid_request_error", f"requests.{i}.custom_id: {cid!r} is used more than "
                              f"once in the batch")
            if not isinstance(item.get("params"), dict):
                return _error(400, "invalid_request_error", f"requests.{i}.params: Field required")
            seen.add(cid)
        created = datetime.now(UTC)
        bid = f"msgbatch_{secrets.token_hex(12)}"
        self.batches[bid] = {
            "id": bid, "type": "message_batch", "processing_status": "in_progress",
            "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0,
                               "expired": 0},
            "ended_at": None, "created_at": created.isoformat().replace("+00:00", "Z"),
            "expires_at": (created + timedelta(hours=24)).isoformat().replace("+00:00", "Z"),
            "archived_at": None, "cancel_initiated_at": None, "results_url": None}
        self.requests[bid] = requests
        self.created += 1
        task = asyncio.get_running_loop().create_task(self._run(bid, f"{request.scheme}://{request.host}"))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response(self.batches[bid])

    def _find(self, request: web.Request) -> dict[str, Any] | web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "not_found_error", f"message batch {request.match_info['id']!r} not found")
        return batch

    async def retrieve(self, request: web.Request) -> web.Response:
        found = self._find(request)
        return found if isinstance(found, web.Response) else web.json_response(found)

    async def results_file(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        if found["processing_status"] != "ended":
            return _error(400, "invalid_request_error", f"message batch {found['id']!r} has not ended: its results "
                          f"are not available yet")
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in reversed(self.results[found["id"]]))
        return web.Response(body=lines.encode(), content_type="application/binary")

    async def cancel(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        if found["processing_status"] == "ended":
            return _error(400, "invalid_request_error", f"message batch {found['id']!r} has ended: it cannot be "
                          f"canceled")
        found.update(processing_status="canceling", cancel_initiated_at=found["cancel_initiated_at"] or _now())
        return web.json_response(found)

    async def list(self, request: web.Request) -> web.Response:
        given = request.query.get("limit", "20")
        if not given.isdigit() or not 1 <= int(given) <= 1000:
            return _error(400, "invalid_request_error", "limit: an integer between 1 and 1000")
        limit, newest = int(given), list(reversed(self.batches.values()))
        ids = [b["id"] for b in newest]
        if "after_id" in request.query:
            after = request.query["after_id"]
            newest = newest[ids.index(after) + 1:] if after in ids else []
        elif "before_id" in request.query:
            before = request.query["before_id"]
            newest = newest[:ids.index(before)][-limit:] if before in ids else []
        page = newest[:limit]
        return web.json_response({"data": page, "has_more": len(newest) > limit,
                                  "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None})

    # ---- running a batch ----------------------------------------------------------------------------------
    async def _run(self, bid: str, base: str) -> None:
        batch, requests = self.batches[bid], self.requests[bid]
        results: dict[str, dict[str, Any]] = {}
        todo = iter(requests)

        async def worker() -> None:
            for item in todo:
                await self.gate.wait()
                if batch["processing_status"] == "canceling" or (
                        self.expire_after is not None and len(results) >= self.expire_after):
                    return
                status, payload = self.answer(item["params"])
                result = ({"type": "succeeded", "message": payload} if status == 200 else
                          {"type": "errored", "error": {**payload, "request_id": f"req_{secrets.token_hex(12)}"}})
                results[item["custom_id"]] = {"custom_id": item["custom_id"], "result": result}
                await asyncio.sleep(0)

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        left = "canceled" if batch["processing_status"] == "canceling" else "expired"
        for item in requests:
            results.setdefault(item["custom_id"], {"custom_id": item["custom_id"], "result": {"type": left}})
        self.results[bid] = [results[item["custom_id"]] for item in requests]
        kinds = Counter(r["result"]["type"] for r in self.results[bid])
        counts = {"processing": 0, **{k: kinds[k] for k in ("succeeded", "errored", "canceled", "expired")}}
        batch.update(processing_status="ended", ended_at=_now(), request_counts=counts,
                     results_url=f"{base}/v1/messages/batches/{bid}/results")
