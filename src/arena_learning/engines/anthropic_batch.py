"""Anthropic's Message Batches as batch mode's provider (``engines.batch``) for ``engine: anthropic``.

A job is one ``messages.batches.create(requests=[{custom_id, params}])``: custom_id is the call's ledger key (a
sha256 hex digest, 64 characters of ``[a-f0-9]``, inside the API's ``^[a-zA-Z0-9_-]{1,64}$`` as it is, so a
result maps back to its key with no table) and params the very ``messages.create`` arguments a synchronous
call sends. The job is polled by ``retrieve`` on its ``processing_status`` (in_progress, canceling, ended); an
ended job's results are streamed with ``results`` (``succeeded``, ``errored``, ``canceled``, ``expired`` per
request, in any order) and read into the ledger by custom_id.

A Message Batch carries no metadata, so a job cannot be found again by what it holds: its id is stored as soon
as ``create`` returns. A run killed between sending the create request and storing its id submits that job
again on the next run (the one window where a call can be paid twice); everything else resumes by polling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import EngineError
from ..store import BatchRecord
from .base import Request
from .batch_lines import MESSAGES_URL, BadLine, BatchCall, Polled, ReplyLine, batch_call

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

    from .anthropic_engine import AnthropicEngine
    from .batch import Job

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What the Message Batches API takes as a custom_id."""
HOSTED = "https://api.anthropic.com"


class AnthropicJobs:
    """The Message Batches endpoints on one ``anthropic`` client (the engine's key, base URL and retries)."""

    def __init__(self, engine: AnthropicEngine):
        import anthropic

        self.engine = engine
        self.endpoint = (engine.spec.base_urls[0] if engine.spec.base_urls else HOSTED).rstrip("/")
        self.errors: type[Exception] = anthropic.AnthropicError
        self.not_found: type[Exception] = anthropic.NotFoundError
        self.client: AsyncAnthropic = anthropic.AsyncAnthropic(
            api_key=engine.api_key, base_url=self.endpoint, max_retries=engine.spec.max_retries,
            timeout=engine.spec.timeout_s)

    async def close(self) -> None:
        await self.client.close()

    def item(self, key: str, request: Request, params_json: str) -> tuple[BatchCall, bytes]:
        if not CUSTOM_ID.match(key):  # a ledger key is a sha256 hex digest: never, unless the key's format changes
            raise EngineError(f"ledger key {key!r} is not a Message Batches custom_id (^[a-zA-Z0-9_-]{{1,64}}$)")
        body = self.engine.body(request)
        params = {k: v for k, v in body.items() if k != "extra_body"} | body.get("extra_body", {})
        line = json.dumps({"custom_id": key, "params": params}, ensure_ascii=False, separators=(",", ":"))
        return batch_call(self.engine, request, params_json, MESSAGES_URL), line.encode()

    async def submit(self, job: Job, save: Callable[..., Awaitable[None]]) -> str:
        created = await self.client.messages.batches.create(
            requests=[json.loads(line) for line in job.lines or []])
        return created.id

    async def find(self, record: BatchRecord) -> str | None:
        return None  # no metadata to know a job by: resubmitted (see the module's docstring)

    async def poll(self, job: Job) -> Polled:
        batch = await self.client.messages.batches.retrieve(job.batch_id or "")
        counts = batch.request_counts
        done = counts.succeeded + counts.errored + counts.canceled + counts.expired  # 0 until it ends
        return Polled(batch.processing_status, batch.processing_status == "ended", done, counts.model_dump(), batch)

    async def replies(self, job: Job, polled: Polled) -> tuple[list[ReplyLine | BadLine], str | None]:
        lines: list[ReplyLine | BadLine] = []
        results = await self.client.messages.batches.results(job.batch_id or "")
        async for response in results:
            lines.append(_reply_line(len(lines) + 1, response.custom_id, response.result))
        return lines, None


def _reply_line(number: int, custom_id: str, result: Any) -> ReplyLine:
    """Return one result as the reply line ``batch_lines.settle`` reads: a Message, or why there is none."""
    if result.type == "succeeded":
        return ReplyLine(number, custom_id, 200, result.message.model_dump(mode="json"), None)
    if result.type == "errored":
        error = result.error.error
        return ReplyLine(number, custom_id, None, None, {"code": error.type, "message": error.message})
    return ReplyLine(number, custom_id, None, None, {"code": f"batch_{result.type}",
                                                     "message": f"the request was {result.type} before it ran"})
