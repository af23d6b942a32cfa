"""One road for every model call: engine -> ledger.

``run_requests`` looks every request up in the ledger first; only the ones
with no success are sent, with the engine's concurrency. Each result is
written as it arrives: a commit is scheduled on the event loop right after a
completion, so under load many results share one commit and a slow model gets
one commit per answer; a killed process loses at most the results of the
current loop iteration. Failures are recorded with their error and retried
on the next run; they come back as ``None``, never as an answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .base import CallFailed, Completion, Engine, Request
from ..store import Store, call_key


@dataclass
class CallStats:
    """What a batch of calls did: served from the ledger, sent, failed, tokens."""

    cached: int = 0
    sent: int = 0
    ok: int = 0
    failed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: CallStats) -> None:
        self.cached += other.cached
        self.sent += other.sent
        self.ok += other.ok
        self.failed += other.failed
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.errors.extend(other.errors[:20])


def request_key(engine: Engine, request: Request) -> str:
    """Return the ledger key of ``request`` on ``engine``."""
    return call_key(engine.kind, engine.model_id, engine.key_params(request), request.payload())


class _LedgerWriter:
    """Buffers finished calls and commits them at the next turn of the event loop."""

    def __init__(self, store: Store):
        self.store = store
        self.rows: list[dict[str, Any]] = []
        self.scheduled = False

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if self.rows:
            rows, self.rows = self.rows, []
            self.store.record_calls(rows)


async def arun_requests(
    store: Store,
    engine: Engine,
    requests: Sequence[Request],
    *,
    label: str = "calls",
    stats: CallStats | None = None,
    progress: Progress | None = None,
) -> list[Completion | None]:
    """Return one Completion (or None for a failed call) per request, in order."""
    stats = stats if stats is not None else CallStats()
    keys = [request_key(engine, r) for r in requests]
    known = store.lookup_calls(list(dict.fromkeys(keys)))
    results: dict[str, Completion | None] = {}
    todo: dict[str, Request] = {}
    for key, req in zip(keys, requests):
        rec = known.get(key)
        if rec is not None and rec.status == "ok" and rec.response is not None:
            results[key] = Completion.model_validate(rec.response)
        elif key not in todo:
            todo[key] = req
    stats.cached += len(requests) - sum(1 for k in keys if k in todo)

    writer = _LedgerWriter(store)
    # Bound the coroutines alive at once; the engine bounds what is on the wire.
    gate = asyncio.Semaphore(max(1, engine.in_flight))
    task_id = progress.add_task(label, total=len(todo)) if progress is not None and todo else None

    async def one(key: str, req: Request) -> None:
        async with gate:
            row: dict[str, Any] = {
                "key": key,
                "engine": engine.kind,
                "model": engine.model_id,
                "request": {"params": engine.key_params(req), **req.payload()},
            }
            stats.sent += 1
            try:
                comp = await engine.complete(req)
            except CallFailed as err:
                results[key] = None
                stats.failed += 1
                if len(stats.errors) < 20:
                    stats.errors.append(str(err))
                writer.add({**row, "status": "error", "error": str(err)})
            else:
                results[key] = comp
                stats.ok += 1
                stats.tokens_in += comp.tokens_in
                stats.tokens_out += comp.tokens_out
                writer.add(
                    {
                        **row,
                        "status": "ok",
                        "response": comp.model_dump(),
                        "tokens_in": comp.tokens_in,
                        "tokens_out": comp.tokens_out,
                        "latency_s": comp.latency_s,
                    }
                )
            if task_id is not None:
                progress.advance(task_id)

    try:
        await asyncio.gather(*(one(k, r) for k, r in todo.items()))
    finally:
        writer.flush()
        await engine.aclose()
    return [results.get(k) for k in keys]


def make_progress() -> Progress:
    """Return the rich progress display used by every long stage."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        # Progress goes to stderr so that stdout carries only results (e.g. --json).
        console=Console(stderr=True),
        transient=False,
    )


def run_requests(
    store: Store,
    engine: Engine,
    requests: Sequence[Request],
    *,
    label: str = "calls",
    stats: CallStats | None = None,
    show_progress: bool = True,
) -> list[Completion | None]:
    """Synchronous ``arun_requests`` with a progress bar."""
    if not show_progress:
        return asyncio.run(arun_requests(store, engine, requests, label=label, stats=stats))
    with make_progress() as progress:
        return asyncio.run(arun_requests(store, engine, requests, label=label, stats=stats, progress=progress))
