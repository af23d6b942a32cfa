"""The Batch API's JSONL lines: requests out, replies back, each reply settled into a ledger row.

One request line is ``{"custom_id", "method": "POST", "url", "body"}``, its custom_id the call's ledger key
and its body the very bytes the synchronous engine sends. One reply line is ``{"id", "custom_id",
"response": {"status_code", "request_id", "body"}, "error"}``: OpenAI's output and error files and
``vllm run-batch``'s output alike. Batch mode (``engines.batch``) and offline batch files
(``arena batch export`` / ``import``) share both directions, so a reply read back from either is the ledger
row a synchronous call would have written under the same key.

What a call needs to become a ledger row without its engine (``BatchCall``) is recorded in the workspace
with its batch before anything is sent (``Store.add_batch``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .base import CallFailed, Completion, Engine, Request
from .reasoning import split_reasoning
from .replies import KEPT_EMPTY, empty_error, is_empty

BATCH_URLS = {"/chat/completions": "/v1/chat/completions", "/completions": "/v1/completions"}
"""The Batch API's endpoint (a request line's url) for each path the synchronous engine posts to."""
MESSAGES_URL = "/v1/messages"
"""The endpoint of an Anthropic Message Batches call (its reply body is a Message)."""


@dataclass(frozen=True)
class BatchCall:
    """One call of a batch as the workspace records it: its ledger row's request side and how to read its reply."""

    engine: str
    model: str  # the ledger's model id
    requested_by: str
    request_json: str  # the ledger row's request: {"params": ..., **payload}
    url: str  # the Batch API endpoint of its line (BATCH_URLS)
    strip: bool  # strip whitespace around the reply's text (a completion-mode model)
    empty_fails: bool  # an empty reply is a failed call (empty_replies: fail), else the model's answer

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> BatchCall:
        return cls(**json.loads(text))


def batch_call(engine: Engine, request: Request, params_json: str, url: str) -> BatchCall:
    """Return the BatchCall of ``request`` on ``engine`` (``params_json``: its key params' canonical JSON; ``url``:
    its batch endpoint, one of BATCH_URLS or MESSAGES_URL)."""
    reading: dict[str, bool] = getattr(engine, "reading", dict)()
    return BatchCall(engine=engine.kind, model=engine.model_id, requested_by=engine.spec.name,
                     request_json=f'{{"params":{params_json},{request.payload_json()[1:]}',
                     url=url, strip=reading.get("strip", False),
                     empty_fails=engine.spec.empty_replies == "fail")


def request_line(key: str, url: str, body: bytes) -> bytes:
    """Return one request line of a batch input file (no newline): ``body`` is spliced in as it is."""
    return b'{"custom_id":"%s","method":"POST","url":"%s","body":%s}' % (key.encode(), url.encode(), body)


@dataclass
class Polled:
    """What one look at a job found: the provider's status word, whether it is final, its requests done so far."""

    status: str
    final: bool
    done: int
    counts: dict[str, int] | None
    job: Any = None  # the provider's job object, for reading its replies back


@dataclass
class ReplyLine:
    """One line of an output or error file: its number (1-based), custom_id, and reply or error."""

    number: int
    custom_id: str
    status_code: int | None  # None: no response (the line's ``error`` says why)
    body: Any
    error: dict[str, Any] | None


@dataclass
class BadLine:
    """A line of a results file that could not be read: where, which custom_id if any, and why."""

    number: int
    custom_id: str | None
    why: str


_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([^"]*)"')


def read_replies(text: str) -> Iterator[ReplyLine | BadLine]:
    """Yield each non-blank line of an output or error file, read (``ReplyLine``) or not (``BadLine``)."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as err:
            found = _CUSTOM_ID.search(line)
            yield BadLine(number, found.group(1) if found else None, f"not JSON ({err})")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("custom_id"), str):
            yield BadLine(number, None, "no custom_id (a line is {\"custom_id\", \"response\", \"error\"})")
            continue
        response, error = data.get("response"), data.get("error")
        if response is None and not error:
            yield BadLine(number, data["custom_id"], "neither a response nor an error")
            continue
        if isinstance(response, dict) and "status_code" not in response and "choices" in response:
            response = {"status_code": 200, "body": response}  # a runner that writes the completion itself
        if response is not None and not (isinstance(response, dict) and isinstance(response.get("status_code"), int)):
            yield BadLine(number, data["custom_id"], "its response has no status_code")
            continue
        yield ReplyLine(number, data["custom_id"], None if response is None else response["status_code"],
                        None if response is None else response.get("body"),
                        error if isinstance(error, dict) else ({"message": str(error)} if error else None))


def settle(key: str, call: BatchCall, line: ReplyLine) -> tuple[dict[str, Any], Completion | None]:
    """Return the ledger row of ``line`` (the reply of ``call``, ledger key ``key``) and its Completion (None: failed).

    As the synchronous road decides (``engines.calls``): an error line or a status other than 200 is a failed call,
    retried later; a reply all reasoning and no answer is a failed call; an empty reply is the model's answer (noted
    as kept) unless the model fails empty replies. It is not asked again within the run: a batch reply is final.
    """
    row: dict[str, Any] = {"key": key, "engine": call.engine, "model": call.model,
                           "requested_by": call.requested_by, "request_json": call.request_json}
    try:
        comp = _completion(call, line)
    except CallFailed as err:
        return {**row, "status": "error", "error": str(err)}, None
    note = None
    if is_empty(comp):
        if comp.reasoning or call.empty_fails:
            return {**row, "status": "error", "error": empty_error(comp)}, None
        note = f"{KEPT_EMPTY} (a batch reply); {empty_error(comp).removesuffix('; retried on the next run')}"
    return {**row, "status": "ok", "error": note, "response_json": comp.model_dump_json(),
            "tokens_in": comp.tokens_in, "tokens_out": comp.tokens_out, "latency_s": 0.0}, comp


def _completion(call: BatchCall, line: ReplyLine) -> Completion:
    from .openai_compat import parse_completion

    if line.error and line.status_code in (None, 200):
        raise CallFailed(f"batch line failed: {line.error.get('code') or 'error'}: {line.error.get('message', '')}")
    if line.status_code != 200:
        detail = line.body.get("error", line.body) if isinstance(line.body, dict) else line.body
        message = detail.get("message", detail) if isinstance(detail, dict) else detail
        raise CallFailed(f"HTTP {line.status_code} inside a batch: {str(message)[:300]}")
    if call.url == MESSAGES_URL:
        from .anthropic_engine import message_completion

        return split_reasoning(message_completion(line.body))
    return split_reasoning(parse_completion(line.body, chat=call.url == "/v1/chat/completions", strip=call.strip))
