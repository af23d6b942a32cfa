"""One road for every model call: engine -> ledger.

``run_requests`` looks every request up in the ledger first; only the ones
with no success are sent, with the engine's concurrency. Each result is
written as it arrives: a commit is scheduled ``FLUSH_DELAY_S`` (20 ms) after a
completion, so under load many results share one commit and a slow model gets
one commit per answer; a killed process loses at most the results of the last
20 ms (and of a commit under way), which the next run asks again. The commits
run on a worker thread, one at a time: their disk writes (a WAL checkpoint's
fsync among them) overlap the calls in flight instead of stalling the event
loop (0.2-0.4 s of a 3,000-call judge stage). Failures are recorded with their
error and retried on the next run; they come back as ``None``, never as an answer.

What counts as a success is decided here, for every engine:

- an empty completion (no text, or only whitespace; e.g. ``content: null``) is
  the model's answer, judged like any other (it loses), and counted in ``empty``.
  Failing it would drop exactly the model's worst prompts from the arena and
  flatter its rating (the bundled base model answers some prompts with nothing,
  every time, in process or behind `arena serve`). A request that asking again
  could change (``Engine.repeatable`` is false: an endpoint, an unseeded
  sample) is first asked again within the run, ``spec.empty_retries`` times
  with backoff (a transient fault); one still empty is kept (its ledger row is
  a success whose ``error`` notes it was kept) unless ``spec.empty_replies`` is
  ``fail``: then it is a failed call, retried on the next run (an endpoint
  known to drop replies). A reply that is all reasoning and no answer is a
  failed call at once (max_tokens ran out while thinking: raise it). A ledger
  row that an older version stored as a success with empty text and no such
  note is asked again;
- a completion cut off at ``max_tokens`` (``finish_reason == "length"``) is
  kept, and counted (``CallStats.truncated``); the ledger's response keeps its
  finish_reason, so a rerun counts it again;
- reasoning (``<think>`` blocks, a reply's ``reasoning_content``) is split off
  every completion, new or from the ledger, before anything else looks at it
  (``engines.reasoning``): a reply that is all reasoning and no answer is empty.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..progress import Track, tracking
from ..store import Store, call_key_json, canonical_json
from . import batch
from .base import CallFailed, Completion, Engine, Request
from .reasoning import split_reasoning
from .replies import KEPT_EMPTY, empty_error, is_empty, is_truncated
from .spend import call_cost, current_guard, current_stage, upper_bound


@dataclass
class CallStats:
    """What a batch of calls did: served from the ledger, sent, failed, cut off, tokens.

    ``empty`` counts completions with no text: failed ones (also in ``failed``) and, for
    repeatable requests, kept ones (also in ``ok`` or ``cached``). ``truncated`` counts the
    completions returned (from the ledger or new) that were cut off at max_tokens.
    Tokens count the new calls only.
    """

    cached: int = 0
    sent: int = 0
    ok: int = 0
    failed: int = 0
    empty: int = 0
    truncated: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0  # wall time of the calls sent (the ledger's are free)
    errors: list[str] = field(default_factory=list)

    def add(self, other: CallStats) -> None:
        self.cached += other.cached
        self.sent += other.sent
        self.ok += other.ok
        self.failed += other.failed
        self.empty += other.empty
        self.truncated += other.truncated
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.seconds += other.seconds
        self.errors.extend(other.errors[:20])


def request_key(engine: Engine, request: Request) -> str:
    """Return the ledger key of ``request`` on ``engine``."""
    return call_key_json(engine.kind, engine.model_id, canonical_json(engine.key_params(request)),
                         request.payload_json())


EMPTY_BACKOFF_S = 0.5
"""The first wait before asking an empty reply again within the run (then doubling)."""

FLUSH_DELAY_S = 0.02
"""How long a finished call may wait for others to share its commit (what a killed process can lose)."""


_COMMITS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
"""The worker thread of every ledger commit: one at a time, in the order scheduled."""


class _LedgerWriter:
    """Buffers finished calls and commits them together, at most ``delay`` seconds after the first, on ``_COMMITS``.

    While a commit runs, new results wait for the next one. Nothing else uses the store while a batch is in
    flight (its lookups came before, its callers' writes come after ``close``), so the thread never shares it.
    """

    def __init__(self, store: Store, delay: float = FLUSH_DELAY_S):
        self.store = store
        self.delay = delay
        self.rows: list[dict[str, Any]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.writing: asyncio.Future | None = None  # the commit under way on the worker thread
        self.closing = False  # close() commits what is left itself: nothing more is scheduled

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self._schedule()

    def _schedule(self) -> None:
        if self.timer is None and self.writing is None and self.rows and not self.closing:
            self.timer = asyncio.get_running_loop().call_later(self.delay, self._flush)

    def _flush(self) -> None:
        self.timer = None
        if not self.rows or self.closing:
            return
        rows, self.rows = self.rows, []
        self.writing = asyncio.get_running_loop().run_in_executor(_COMMITS, self.store.record_calls, rows)
        self.writing.add_done_callback(self._written)

    def _written(self, done: asyncio.Future) -> None:
        if done.cancelled() or done.exception() is None:  # a failed commit stays in self.writing for close()
            self.writing = None
            self._schedule()

    async def close(self) -> None:
        """Wait for the commit under way (raising its error), then commit what is left, here.

        No commit is scheduled once it starts: one left for later would run on the thread while the caller
        writes to the store (the same loop runs a stage's next batch).
        """
        self.closing = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.writing is not None:
            await asyncio.shield(self.writing)  # a cancelled batch still waits for its commit to land
            self.writing = None
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
    progress: Track | None = None,
) -> list[Completion | None]:
    """Return one Completion (or None for a failed call) per request, in order; ``progress`` hears each call sent."""
    stats = stats if stats is not None else CallStats()
    # the params and the payload are encoded once each, for the key and (sent) the ledger row
    key_params = [canonical_json(engine.key_params(r)) for r in requests]
    keys = [call_key_json(engine.kind, engine.model_id, p, r.payload_json()) for p, r in zip(key_params, requests)]
    known = store.lookup_calls(list(dict.fromkeys(keys)))
    results: dict[str, Completion | None] = {}
    todo: dict[str, tuple[Request, str]] = {}
    demote: list[tuple[str, str]] = []
    for key, req, params in zip(keys, requests, key_params):
        if key in results:
            stats.cached += 1
            if is_truncated(results[key]):  # type: ignore[arg-type]  # a key in results was answered: not None
                stats.truncated += 1
            continue
        if key in todo:
            continue
        rec = known.get(key)
        if rec is not None and rec.status == "ok" and rec.response_json is not None:
            comp = split_reasoning(Completion.model_validate_json(rec.response_json))
            if is_empty(comp):
                kept = (rec.error or "").startswith(KEPT_EMPTY) and engine.spec.empty_replies == "answer"
                if not engine.repeatable(req) and not kept:
                    # Stored as a success by a version that let empty text through, or kept by a run whose
                    # model now fails empty replies: ask again.
                    demote.append((empty_error(comp), key))
                    todo[key] = (req, params)
                    continue
                stats.empty += 1
            results[key] = comp
            stats.cached += 1
            if is_truncated(comp):
                stats.truncated += 1
        else:
            todo[key] = (req, params)
    if demote:
        store.demote_calls(demote)
    if todo and batch.routed(engine):  # batch mode (or arena batch export): the calls go as batch jobs
        todo = await batch.run_batches(store, engine, todo, results, stats, progress=progress, label=label,
                                       commits=_COMMITS)

    writer = _LedgerWriter(store)
    stage = current_stage()
    guard = current_guard()  # a spend limit: each call holds its upper bound while in flight
    # Bound the coroutines alive at once; the engine bounds what is on the wire.
    gate = asyncio.Semaphore(max(1, engine.in_flight))
    advance = progress(label, len(todo)) if progress is not None and todo else None

    async def one(key: str, req: Request, params_json: str) -> None:
        async with gate:
            held = upper_bound(engine, req) if guard is not None else 0.0
            if guard is not None and not guard.reserve(held):
                return  # not sent: the stage stops at the limit (raised below, once the calls in flight are in)
            cost = 0.0
            row: dict[str, Any] = {
                "key": key,
                "engine": engine.kind,
                "model": engine.model_id,
                "requested_by": engine.spec.name,
                # {"params": ..., **payload}, from the encodings the key was made of
                "request_json": f'{{"params":{params_json},{req.payload_json()[1:]}',
                "stage": stage,
            }
            stats.sent += 1
            note = None
            try:
                comp = split_reasoning(await engine.complete(req))
                if is_empty(comp) and not engine.repeatable(req) and comp.reasoning:
                    # all reasoning and no answer: max_tokens ran out while thinking; asking again repeats it
                    stats.empty += 1
                    raise CallFailed(empty_error(comp))
                if is_empty(comp) and not engine.repeatable(req):
                    for attempt in range(engine.spec.empty_retries):
                        await asyncio.sleep(EMPTY_BACKOFF_S * 2**attempt)
                        comp = split_reasoning(await engine.complete(req))
                        if not is_empty(comp):
                            break
                    if is_empty(comp):
                        if engine.spec.empty_replies == "fail":
                            stats.empty += 1
                            raise CallFailed(empty_error(comp))
                        note = (f"{KEPT_EMPTY} after {1 + engine.spec.empty_retries} tries; "
                                f"{empty_error(comp).removesuffix('; retried on the next run')}")
                if is_empty(comp):
                    stats.empty += 1
            except CallFailed as err:
                results[key] = None
                stats.failed += 1
                if len(stats.errors) < 20:
                    stats.errors.append(str(err))
                writer.add({**row, "status": "error", "error": str(err)})
            else:
                cost = call_cost(engine.spec, comp.tokens_in, comp.tokens_out)
                results[key] = comp
                stats.ok += 1
                if is_truncated(comp):
                    stats.truncated += 1
                stats.tokens_in += comp.tokens_in
                stats.tokens_out += comp.tokens_out
                writer.add(
                    {
                        **row,
                        "status": "ok",
                        "error": note,
                        "response_json": comp.model_dump_json(),
                        "tokens_in": comp.tokens_in,
                        "tokens_out": comp.tokens_out,
                        "latency_s": comp.latency_s,
                        "cost_usd": cost,
                    }
                )
            if guard is not None:
                guard.settle(held, cost)
            if advance is not None:
                advance(1)

    # The engine hears the list first: one that batches (llama.cpp) then batches by its order, not by timing.
    engine.expect([r for r, _ in todo.values()])
    started = time.perf_counter()
    try:
        await asyncio.gather(*(one(k, r, p) for k, (r, p) in todo.items()))
    finally:
        if todo:
            stats.seconds += time.perf_counter() - started
        engine.expect_done()
        await writer.close()
        if not engine.keep_open:
            await engine.aclose()
    if guard is not None and guard.stopped:
        raise guard.error()
    return [results.get(k) for k in keys]


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
    with tracking() as progress:
        return asyncio.run(arun_requests(store, engine, requests, label=label, stats=stats, progress=progress))
