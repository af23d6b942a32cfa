"""A local stand-in for OpenAI's Files and Batches endpoints, whose lines a real model server on 127.0.0.1 answers.

A hosted Batch API cannot be reached from the tests, so this double follows the published API reference and
the official ``openai`` client's types (``openai.types.Batch``, ``FileObject``; the tests drive it with that
client too): ``POST /v1/files`` (multipart, purpose ``batch``), ``GET /v1/files/{id}`` and ``/content``,
``POST /v1/batches`` (input_file_id, endpoint, completion_window ``24h``, metadata of at most 16 pairs),
``GET /v1/batches/{id}``, ``GET /v1/batches?limit&after`` (newest first, cursor pages), ``POST
/v1/batches/{id}/cancel``. A job goes validating -> in_progress -> finalizing -> completed, or failed (an
input that does not validate: ``errors``), expired (``expire_after`` lines done, the rest ``batch_expired``
in the error file) or cancelling -> cancelled; request_counts move as lines finish. Each line is posted to
``upstream`` (``arena serve`` or a scripted server): a 200 goes to the output file, anything else to the error
file with its status and body. ``POST /v1/chat/completions`` and ``/v1/completions`` are passed through
to ``upstream`` as well (a model whose failed lines are retried one request each).

What the tests assert on: ``created`` (jobs created), ``sent`` (each request body sent upstream, by its
canonical JSON: a body sent twice is a call paid twice), ``duplicates``; ``GET /v1/_stats`` gives them to
another process, and ``POST /v1/_reset`` starts them again from 0. ``hold()`` keeps every job in_progress with no
line sent until ``release()`` (``POST /v1/_hold`` and ``/v1/_release`` from another process).

    python tests/batch_server.py --upstream http://127.0.0.1:8000/v1 --port 8100   # in its own process
    python tests/batch_server.py --upstream http://127.0.0.1:8000/v1 --run-file requests.jsonl results.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time
from collections import Counter
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
WINDOWS = ("24h",)


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                        "code": code}}, status=status)


def _canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class BatchServer:
    """The Files and Batches endpoints over ``upstream`` (an OpenAI-compatible base URL, ``.../v1``).

    ``concurrency``: lines sent upstream at once per job; ``expire_after``: a job expires once that many of its
    lines are done; ``step_s``: seconds each status step waits (0: at once).
    """

    def __init__(self, upstream: str, *, concurrency: int = 16, expire_after: int | None = None,
                 step_s: float = 0.0):
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.concurrency, self.expire_after, self.step_s = concurrency, expire_after, step_s
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}  # in creation order
        self.sent: Counter[str] = Counter()
        self.created = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task] = set()
        self.session: ClientSession | None = None
        self.app = web.Application(client_max_size=256 * 1024 * 1024)
        self.app.router.add_post("/v1/files", self.upload)
        self.app.router.add_get("/v1/files/{id}", self.file)
        self.app.router.add_get("/v1/files/{id}/content", self.content)
        self.app.router.add_post("/v1/batches", self.create)
        self.app.router.add_get("/v1/batches", self.list)
        self.app.router.add_get("/v1/batches/{id}", self.retrieve)
        self.app.router.add_post("/v1/batches/{id}/cancel", self.cancel)
        self.app.router.add_post("/v1/chat/completions", self.passthrough)
        self.app.router.add_post("/v1/completions", self.passthrough)
        self.app.router.add_get("/v1/_stats", self.stats)
        self.app.router.add_post("/v1/_hold", self.control)
        self.app.router.add_post("/v1/_release", self.control)
        self.app.router.add_post("/v1/_reset", self.control)
        self.app.on_cleanup.append(self._cleanup)

    # ---- what the tests read and steer --------------------------------------------------------------------
    @property
    def duplicates(self) -> int:
        """Request bodies sent upstream more than once (each extra time counts)."""
        return sum(n - 1 for n in self.sent.values() if n > 1)

    def counts(self) -> dict[str, int]:
        return {"created": self.created, "requests": sum(self.sent.values()), "duplicates": self.duplicates,
                "files": len(self.files)}

    def hold(self) -> None:
        """Keep every job in_progress, no line sent, until ``release``."""
        self._call(self.gate.clear)

    def release(self) -> None:
        self._call(self.gate.set)

    def _call(self, fn: Any) -> None:
        if self.loop is not None and self.loop.is_running():
            self.loop.call_soon_threadsafe(fn)
        else:
            fn()

    async def _cleanup(self, _: web.Application) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    def _session(self) -> ClientSession:
        if self.session is None:
            self.session = ClientSession(timeout=ClientTimeout(total=300))
        return self.session

    # ---- files ------------------------------------------------------------------------------------------
    def _new_file(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        fid = f"file-{secrets.token_hex(12)}"
        self.files[fid] = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                           "filename": filename, "purpose": purpose, "status": "processed", "expires_at": None,
                           "status_details": None}
        self.contents[fid] = data
        return self.files[fid]

    async def upload(self, request: web.Request) -> web.Response:
        self.loop = asyncio.get_running_loop()
        form = await request.post()
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose not in ("batch", "fine-tune", "assistants", "vision", "user_data", "evals"):
            return _error(400, f"invalid purpose {purpose!r}", "purpose")
        if upload is None or isinstance(upload, str):
            return _error(400, "a file is required", "file")
        return web.json_response(self._new_file(upload.file.read(), upload.filename, str(purpose)))

    async def file(self, request: web.Request) -> web.Response:
        meta = self.files.get(request.match_info["id"])
        return web.json_response(meta) if meta else _error(404, f"No such File object: {request.match_info['id']}")

    async def content(self, request: web.Request) -> web.Response:
        data = self.contents.get(request.match_info["id"])
        if data is None:
            return _error(404, f"No such File object: {request.match_info['id']}")
        return web.Response(body=data, content_type="application/octet-stream")

    # ---- batches ----------------------------------------------------------------------------------------
    async def create(self, request: web.Request) -> web.Response:
        self.loop = asyncio.get_running_loop()
        body = await request.json()
        fid, endpoint, window = body.get("input_file_id"), body.get("endpoint"), body.get("completion_window")
        metadata = body.get("metadata") or {}
        if fid not in self.files:
            return _error(400, f"No such File object: {fid}", "input_file_id")
        if self.files[fid]["purpose"] != "batch":
            return _error(400, "the input file must be uploaded with purpose 'batch'", "input_file_id")
        if endpoint not in ENDPOINTS:
            return _error(400, f"invalid endpoint {endpoint!r}", "endpoint")
        if window not in WINDOWS:
            return _error(400, f"invalid completion_window {window!r}: only '24h' is supported", "completion_window")
        if len(metadata) > 16 or any(len(k) > 64 or not isinstance(v, str) or len(v) > 512
                                     for k, v in metadata.items()):
            return _error(400, "metadata: at most 16 pairs, keys of 64 characters, string values of 512", "metadata")
        now = int(time.time())
        bid = f"batch_{secrets.token_hex(12)}"
        batch: dict[str, Any] = {
            "id": bid, "object": "batch", "endpoint": endpoint, "errors": None, "input_file_id": fid,
            "completion_window": window, "status": "validating", "output_file_id": None, "error_file_id": None,
            "created_at": now, "in_progress_at": None, "expires_at": now + 24 * 3600, "finalizing_at": None,
            "completed_at": None, "failed_at": None, "expired_at": None, "cancelling_at": None,
            "cancelled_at": None, "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": metadata or None, "model": None,
        }
        self.batches[bid] = batch
        self.created += 1
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response(batch)

    async def retrieve(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        return web.json_response(batch) if batch else _error(404, f"No batch found with id "
                                                                  f"'{request.match_info['id']}'")

    async def list(self, request: web.Request) -> web.Response:
        try:
            limit = int(request.query.get("limit", 20))
        except ValueError:
            return _error(400, "limit must be an integer", "limit")
        if not 1 <= limit <= 100:
            return _error(400, "limit must be between 1 and 100", "limit")
        newest = list(reversed(self.batches.values()))
        after = request.query.get("after")
        if after is not None:
            ids = [b["id"] for b in newest]
            newest = newest[ids.index(after) + 1:] if after in ids else []
        page = newest[:limit]
        return web.json_response({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None, "has_more": len(newest) > limit})

    async def cancel(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, f"No batch found with id '{request.match_info['id']}'")
        if batch["status"] not in ("validating", "in_progress"):
            return _error(409, f"Cannot cancel a batch with status '{batch['status']}'")
        batch["status"], batch["cancelling_at"] = "cancelling", int(time.time())
        return web.json_response(batch)

    async def stats(self, _: web.Request) -> web.Response:
        return web.json_response(self.counts())

    async def control(self, request: web.Request) -> web.Response:
        """``POST /v1/_hold``, ``/v1/_release`` (``hold`` and ``release`` from another process) or ``/v1/_reset``
        (the counts start again from 0: a new run's)."""
        action = request.path.rsplit("/", 1)[1]
        if action == "_reset":
            self.sent.clear()
            self.created = 0
        (self.gate.clear if action == "_hold" else self.gate.set)()
        return web.json_response(self.counts())

    # ---- running a job ----------------------------------------------------------------------------------
    def _validate(self, batch: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return the input's lines and the errors that fail the job (OpenAI validates the whole file first)."""
        lines, errors, seen = [], [], set()
        for number, text in enumerate(self.contents[batch["input_file_id"]].decode("utf-8").splitlines(), 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError:
                errors.append({"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.",
                               "param": None, "line": number})
                continue
            problem = None
            if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
                problem = ("missing_required_parameter", "custom_id is required")
            elif line["custom_id"] in seen:
                problem = ("duplicate_custom_id", f"the custom_id '{line['custom_id']}' is used more than once")
            elif line.get("method") != "POST":
                problem = ("invalid_method", "only POST is supported")
            elif line.get("url") != batch["endpoint"]:
                problem = ("mismatched_endpoint", f"the line's url {line.get('url')!r} is not the batch's endpoint")
            elif not isinstance(line.get("body"), dict):
                problem = ("missing_required_parameter", "body is required")
            if problem is not None:
                errors.append({"code": problem[0], "message": problem[1], "param": None, "line": number})
                continue
            seen.add(line["custom_id"])
            lines.append(line)
        if not lines and not errors:
            errors.append({"code": "empty_file", "message": "The input file is empty.", "param": None, "line": None})
        return lines, errors

    async def _step(self) -> None:
        if self.step_s:
            await asyncio.sleep(self.step_s)

    async def _run(self, batch: dict[str, Any]) -> None:
        await self._step()
        lines, errors = self._validate(batch)
        if errors:
            batch.update(status="failed", failed_at=int(time.time()), errors={"object": "list", "data": errors})
            return
        if batch["status"] == "cancelling":
            await self._finish(batch, [], [], lines, "cancelled")
            return
        batch["request_counts"]["total"] = len(lines)
        batch.update(status="in_progress", in_progress_at=int(time.time()))
        outputs: list[dict[str, Any]] = []
        failures: list[dict[str, Any]] = []
        todo = iter(lines)
        done: set[str] = set()

        async def worker() -> None:
            for line in todo:
                await self.gate.wait()
                if batch["status"] == "cancelling" or self._expired(batch):
                    return
                ok, record = await self._send(line)
                (outputs if ok else failures).append(record)
                done.add(line["custom_id"])
                batch["request_counts"]["completed" if ok else "failed"] += 1

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        left = [line for line in lines if line["custom_id"] not in done]
        end = "cancelled" if batch["status"] == "cancelling" else "expired" if left else "completed"
        await self._finish(batch, outputs, failures, left, end)

    def _expired(self, batch: dict[str, Any]) -> bool:
        counts = batch["request_counts"]
        return self.expire_after is not None and counts["completed"] + counts["failed"] >= self.expire_after

    async def _send(self, line: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Post one line upstream; return whether it succeeded and its output (or error) file line."""
        self.sent[_canonical(line["body"])] += 1
        record: dict[str, Any] = {"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": line["custom_id"],
                                  "response": None, "error": None}
        try:
            async with self._session().post(self.upstream + line["url"], json=line["body"]) as resp:
                raw = await resp.read()
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = {"error": {"message": raw[:300].decode("utf-8", "replace")}}
                record["response"] = {"status_code": resp.status, "request_id": f"req_{secrets.token_hex(12)}",
                                      "body": body}
                return resp.status == 200, record
        except (ClientError, asyncio.TimeoutError) as err:
            record["error"] = {"code": "server_error", "message": f"the model server failed: {err}"}
            return False, record

    async def _finish(self, batch: dict[str, Any], outputs: list[dict[str, Any]], failures: list[dict[str, Any]],
                      left: list[dict[str, Any]], end: str) -> None:
        batch.update(status="finalizing" if end != "cancelled" else "cancelling",
                     finalizing_at=int(time.time()) if end != "cancelled" else None)
        await self._step()
        code = {"expired": "batch_expired", "cancelled": "batch_cancelled"}.get(end)
        if code is not None:
            message = ("This request could not be executed before the completion window expired."
                       if end == "expired" else "This request was not executed: the batch was cancelled.")
            failures += [{"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": line["custom_id"],
                          "response": None, "error": {"code": code, "message": message}} for line in left]
        for name, records in (("output_file_id", outputs), ("error_file_id", failures)):
            if records:
                data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
                batch[name] = self._new_file(data, f"{batch['id']}_{name[:-8]}.jsonl", "batch_output")["id"]
        now = int(time.time())
        batch.update(status=end, **{f"{end}_at": now})

    async def passthrough(self, request: web.Request) -> web.Response:
        """A synchronous request, sent upstream as it is (and counted)."""
        body = await request.json()
        self.sent[_canonical(body)] += 1
        async with self._session().post(self.upstream + request.path, json=body) as resp:
            return web.Response(body=await resp.read(), status=resp.status, content_type="application/json")



async def run_file(upstream: str, requests: str, out: str, concurrency: int = 16) -> None:
    """Answer a request file as ``vllm run-batch -i REQUESTS -o OUT`` does: each line sent to ``upstream``, every
    reply (errors included) one line of ``out``, in the input's order."""
    server = BatchServer(upstream)
    with open(requests, encoding="utf-8") as fh:
        lines = [json.loads(text) for text in fh if text.strip()]
    gate = asyncio.Semaphore(concurrency)

    async def one(line: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            return (await server._send(line))[1]

    try:
        records = await asyncio.gather(*(one(line) for line in lines))
    finally:
        await server._cleanup(server.app)
    with open(out, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="the model server's base URL (.../v1)")
    ap.add_argument("--port", type=int, help="serve the Files and Batches endpoints on this port")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--run-file", nargs=2, metavar=("REQUESTS", "OUT"), help="answer a request file into OUT and "
                    "exit, as `vllm run-batch -i REQUESTS -o OUT` does")
    args = ap.parse_args()
    if args.run_file:
        asyncio.run(run_file(args.upstream, *args.run_file, concurrency=args.concurrency))
        return
    server = BatchServer(args.upstream, concurrency=args.concurrency)
    web.run_app(server.app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
