"""Batch mode: the calls a stage still needs from an endpoint, sent as Batch API jobs and read back into the ledger.

For a model with ``batch.enabled`` the ledger road (``engines.calls``) hands its uncached calls here. They are
split into jobs under ``batch.max_requests`` and ``batch.max_bytes``, each job recorded in the workspace with
its calls (ledger keys) before anything is uploaded; then, through the official ``openai`` client, its JSONL
input file is uploaded (Files API), the job created (Batches API) with its record's id in ``metadata``, and each
id stored as its call returns. The open jobs are polled every ``batch.poll_s``; a finished job's output and
error files are read back into the ledger under the keys a synchronous call has (``engines.batch_lines``).
That is ``OpenAIJobs``; an ``engine: anthropic`` model's jobs are Message Batches (``engines.anthropic_batch``):
the runner is one, each provider's endpoints a small ``JobsApi``.

Killed at any moment, a rerun finds its open jobs in the workspace and waits for them: by the stored job id, or,
killed between the creation and its storing, by listing the jobs and matching the id in their metadata. Nothing
is submitted twice (a Message Batch has no metadata: there, that one window submits it again). The calls a job
failed (error lines; the rest of an expired, cancelled or failed job) are asked again in a new job (``failed:
retry_batch``, ``retries`` times) or one request each (``failed: sync``).

``capturing`` turns the road into a recorder instead (``arena batch export``): every uncached call is noted,
none is sent, and each comes back failed, so a stage run on a scratch copy of the workspace lists exactly what
it would still ask.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import EngineError
from ..progress import Advance, Track
from ..store import BatchRecord, Store
from .base import Completion, Engine, Request
from .batch_lines import (
    BATCH_URLS,
    BadLine,
    BatchCall,
    Polled,
    ReplyLine,
    batch_call,
    read_replies,
    request_line,
    settle,
)
from .replies import is_empty, is_truncated
from .spend import call_cost, check_spend, current_stage, settle_spend, upper_bound

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from openai import AsyncOpenAI

    from .calls import CallStats
    from .openai_compat import OpenAIEngine

Todo = dict[str, tuple[Request, str]]
"""The calls to make: ledger key -> (request, its key params' canonical JSON), as ``arun_requests`` holds them."""

FINAL = {"completed", "expired", "cancelled", "failed"}
"""A job's statuses after which nothing more comes: its files are read back."""


# ---- capture (arena batch export) ------------------------------------------------------------------------------


@dataclass
class Capture:
    """The calls a stage would send, noted instead of sent: per model, ledger key -> (call, request line)."""

    calls: dict[str, dict[str, tuple[BatchCall, bytes]]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # calls of models that are no endpoint, by model
    # called when a model's calls come a second time (an adaptive schedule's next round: chosen on verdicts that
    # did not come); it may raise to end the stage
    on_repeat: Callable[[], None] | None = None
    seen: set[str] = field(default_factory=set)

    def add(self, engine: Engine, todo: Todo) -> None:
        from .openai_compat import OpenAIEngine

        if engine.spec.name in self.seen and self.on_repeat is not None:
            self.on_repeat()
        self.seen.add(engine.spec.name)
        if not isinstance(engine, OpenAIEngine):
            self.skipped[engine.spec.name] = self.skipped.get(engine.spec.name, 0) + len(todo)
            return
        mine = self.calls.setdefault(engine.spec.name, {})
        for key, (request, params_json) in todo.items():
            path, body = engine.wire(request)
            call = batch_call(engine, request, params_json, BATCH_URLS[path])
            mine[key] = (call, request_line(key, call.url, body))


_CAPTURE: ContextVar[Capture | None] = ContextVar("batch_capture", default=None)


@contextmanager
def capturing() -> Iterator[Capture]:
    """Within the block, the ledger road sends nothing: it notes every uncached call in the Capture yielded."""
    capture = Capture()
    token = _CAPTURE.set(capture)
    try:
        yield capture
    finally:
        _CAPTURE.reset(token)


def routed(engine: Engine) -> bool:
    """Return whether ``engine``'s uncached calls go through this module (a capture, or batch mode) instead of
    being sent one request each."""
    if _CAPTURE.get() is not None:
        return True
    from .anthropic_engine import AnthropicEngine
    from .openai_compat import OpenAIEngine

    return engine.spec.batch.enabled and isinstance(engine, OpenAIEngine | AnthropicEngine)


# ---- batch mode ----------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One batch job of this run: its workspace record and calls, and the input file when it is ours to upload."""

    record: BatchRecord
    calls: dict[str, BatchCall]
    lines: list[bytes] | None = None  # the input file's lines; None: resumed (rebuilt if it must be uploaded)
    batch_id: str | None = None
    file_id: str | None = None
    advance: Advance | None = None
    seen: int = 0  # lines the job reported done (completed + failed), for the progress bar
    held_usd: float = 0.0  # held against the spend limit (its calls at max_tokens, batch price) until it ends

    @property
    def url(self) -> str:
        return next(iter(self.calls.values())).url


async def run_batches(store: Store, engine: Engine, todo: Todo, results: dict[str, Completion | None],
                      stats: CallStats, *, commits: Executor, progress: Track | None = None,
                      label: str = "calls") -> Todo:
    """Make the calls of ``todo`` as batch jobs (or note them, capturing); return the calls left to send one
    request each (``failed: sync``). ``results`` gets each call's Completion (None: failed); the workspace is
    written on ``commits``, the ledger's commit thread, in turn with the commits of calls in flight elsewhere."""
    capture = _CAPTURE.get()
    if capture is not None:
        capture.add(engine, todo)
        results.update(dict.fromkeys(todo))
        return {}
    runner = _Runner(store, engine, jobs_api(engine), results, stats, commits, progress, label)
    started = time.perf_counter()
    try:
        return await runner.run(todo)
    finally:
        stats.seconds += time.perf_counter() - started
        await runner.close()


class JobsApi(Protocol):
    """One provider's batch endpoints as the runner uses them (OpenAI: Files + Batches; Anthropic: Message
    Batches). ``errors``: the SDK's error type (the endpoint failed); ``not_found``: the job is unknown there."""

    endpoint: str  # the base URL its jobs are recorded under
    errors: type[Exception]
    not_found: type[Exception]

    def item(self, key: str, request: Request, params_json: str) -> tuple[BatchCall, bytes]:
        """Return a call's record and its request as one line of the job's input (its size counts to max_bytes)."""
        ...

    async def submit(self, job: Job, save: Callable[..., Awaitable[None]]) -> str:
        """Create the job (uploading its input first where the API asks); ``save(file_id=...)`` stores an id
        as it comes. Return the job's id."""
        ...

    async def find(self, record: BatchRecord) -> str | None:
        """Return the id of the job created for ``record`` before its id could be stored, if the API can tell."""
        ...

    async def poll(self, job: Job) -> Polled: ...

    async def replies(self, job: Job, polled: Polled) -> tuple[list[ReplyLine | BadLine], str | None]:
        """Return a finished job's reply lines and why a call with none has none (None: the API did not say)."""
        ...

    async def close(self) -> None: ...


def jobs_api(engine: Engine) -> JobsApi:
    """Return the batch endpoints of ``engine``'s provider."""
    from .anthropic_engine import AnthropicEngine

    if isinstance(engine, AnthropicEngine):
        from .anthropic_batch import AnthropicJobs

        return AnthropicJobs(engine)
    from .openai_compat import OpenAIEngine

    assert isinstance(engine, OpenAIEngine)
    return OpenAIJobs(engine)


class _Runner:
    """The batch jobs of one ``run_batches`` call, through one provider's ``JobsApi``."""

    def __init__(self, store: Store, engine: Engine, api: JobsApi, results: dict[str, Completion | None],
                 stats: CallStats, commits: Executor, progress: Track | None, label: str):
        self.store, self.engine, self.api, self.results, self.stats = store, engine, api, results, stats
        self.commits = commits
        self.settings = engine.spec.batch
        self.base_url = api.endpoint
        self.progress, self.label = progress, label
        self.todo: Todo = {}
        self.errors: dict[str, str] = {}  # the last error of each call that failed in a job

    async def close(self) -> None:
        await self.api.close()

    async def run(self, todo: Todo) -> Todo:
        self.todo = todo
        pending = dict(todo)
        for attempt in range(self.settings.retries + 1):
            jobs = self._resumed(pending) + await self._planned(pending)
            self._hold(jobs)
            # every upload and creation settles (and its id is stored) before the first error is raised
            for error in await asyncio.gather(*(self._submit(job) for job in jobs), return_exceptions=True):
                if isinstance(error, BaseException):
                    raise error
            failed = await self._wait([job for job in jobs if job.batch_id is not None])
            pending = {k: todo[k] for k in failed if k in todo and self.results.get(k) is None}
            last = self.settings.failed == "sync" or attempt == self.settings.retries
            if pending and not last:
                self.stats.failed -= len(pending)  # asked again: counted by how the retry ends
            if not pending or last:
                break
        if self.settings.failed == "sync":
            self.stats.failed -= len(pending)  # sent again one request each, and counted there
            return pending
        room = max(0, 20 - len(self.stats.errors))
        self.stats.errors.extend(self.errors[k] for k in list(pending)[:room])  # the calls that stay failed
        return {}

    # ---- the workspace's records ------------------------------------------------------------------------------
    async def _db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a store call on the ledger's commit thread, in turn with the commits of calls in flight elsewhere."""
        return await asyncio.get_running_loop().run_in_executor(self.commits, lambda: fn(*args, **kwargs))

    def _resumed(self, pending: Todo) -> list[Job]:
        """Return the open jobs recorded here (an earlier run's) that hold any of ``pending``'s calls."""
        jobs = []
        for record in self.store.get_batches("open", endpoint_prefix="http"):
            if record.model != self.engine.spec.name:
                continue
            calls = {k: BatchCall.from_json(c) for k, c in self.store.batch_calls(record.id).items()}
            if any(k in pending for k in calls):
                jobs.append(Job(record, calls, batch_id=record.batch_id, file_id=record.file_id))
        return jobs

    async def _planned(self, pending: Todo) -> list[Job]:
        """Return new jobs for the calls of ``pending`` that no open job holds, recorded before anything is sent."""
        held = {k for r in self.store.get_batches("open", endpoint_prefix="http") if r.model == self.engine.spec.name
                for k in self.store.batch_calls(r.id)}
        by_url: dict[str, list[tuple[str, BatchCall, bytes]]] = {}
        for key, (request, params_json) in pending.items():
            if key in held:
                continue
            call, line = self.api.item(key, request, params_json)
            by_url.setdefault(call.url, []).append((key, call, line))
        known = {r.id for r in self.store.get_batches()}
        jobs = []
        for url, lines in by_url.items():
            for chunk in split(lines, self.settings.max_requests, self.settings.max_bytes):
                ident = job_id(self.engine.model_id, url, [k for k, _, _ in chunk], known)
                known.add(ident)
                await self._db(self.store.add_batch, ident, self.engine.spec.name, self.base_url,
                               [(k, c.to_json()) for k, c, _ in chunk])
                record = BatchRecord(ident, self.engine.spec.name, self.base_url, None, None, "open", {}, time.time(),
                                     len(chunk))
                jobs.append(Job(record, {k: c for k, c, _ in chunk}, lines=[line for _, _, line in chunk]))
        return jobs

    def _hold(self, jobs: list[Job]) -> None:
        """Hold each job not yet submitted against the run's spend limit (``spend_limit``): its calls at their
        max_tokens, at the batch price; a job that could pass it stops the stage before anything of it is sent
        (raises ``SpendLimitReached``; the job stays recorded and is sent by a run with a higher limit)."""
        spec = self.engine.spec
        share = spec.batch_price if spec.batch_price is not None else 1.0
        for job in jobs:
            if job.batch_id is not None:  # sent by an earlier run: paid whatever happens now
                continue
            bound = sum(upper_bound(self.engine, self.todo[k][0]) for k in job.calls if k in self.todo) * share
            check_spend(bound)
            job.held_usd = bound

    # ---- the provider's batch endpoints ----------------------------------------------------------------------
    async def _submit(self, job: Job) -> None:
        """Create the job (its input uploaded first where the API asks), unless an earlier run did; store each id
        as it comes."""
        if job.batch_id is not None:
            return

        async def save(**ids: str) -> None:
            await self._db(self.store.update_batch, job.record.id, **ids)

        try:
            if job.lines is None:  # recorded by a run that stopped before the job was created, or while creating it
                found = await self.api.find(job.record)
                if found is not None:
                    job.batch_id = found
                    await save(batch_id=found)
                    return
                job.lines = self._rebuild(job)
                if not job.lines:  # none of its calls is asked any more: nothing to send
                    await save(status="dropped")
                    return
            job.batch_id = await self.api.submit(job, save)
        except self.api.errors as err:
            raise EngineError(self._unreachable(job, err)) from None
        await save(batch_id=job.batch_id)

    def _rebuild(self, job: Job) -> list[bytes]:
        """Return the input lines of a recorded job from the requests this run holds (all of them on a rerun of the
        same stage); calls it does not hold are left out of the job."""
        lines = []
        for key in list(job.calls):
            if key not in self.todo:
                del job.calls[key]
                continue
            lines.append(self.api.item(key, *self.todo[key])[1])
        return lines

    def _unreachable(self, job: Job, err: Exception) -> str:
        return (f"model {self.engine.spec.name!r}: the batch endpoint {job.record.endpoint} failed ({err}); the "
                f"workspace keeps batch {job.record.id} and its calls: run again to go on (nothing is submitted "
                f"twice)")

    async def _wait(self, jobs: list[Job]) -> set[str]:
        """Poll ``jobs`` until each is done, reading each one's replies into the ledger as it ends; return the keys
        of the calls that failed."""
        failed: set[str] = set()
        open_jobs = list(jobs)
        for i, job in enumerate(jobs, 1):
            if self.progress is not None:
                job.advance = self.progress(f"{self.label}: batch {i}/{len(jobs)} {job.batch_id}", len(job.calls))
        while open_jobs:
            for job in list(open_jobs):
                lines: list[ReplyLine | BadLine] = []
                why = None
                try:
                    polled = await self.api.poll(job)
                    if polled.final:
                        lines, why = await self.api.replies(job, polled)
                except self.api.not_found:
                    failed |= await self._lost(job)
                    open_jobs.remove(job)
                    continue
                except self.api.errors as err:
                    raise EngineError(self._unreachable(job, err)) from None
                if job.advance is not None and polled.done > job.seen:
                    job.advance(polled.done - job.seen)
                    job.seen = polled.done
                if polled.final:
                    failed |= await self._read_back(job, polled, lines, why)
                    open_jobs.remove(job)
            if open_jobs:
                await asyncio.sleep(self.settings.poll_s)
        return failed

    async def _read_back(self, job: Job, polled: Polled, lines: list[ReplyLine | BadLine], why: str | None
                         ) -> set[str]:
        """Write the replies of a finished job to the ledger; return the keys of its calls that failed."""
        rows, failed = self._settle(job, lines, missing=why or "no reply in the job's results")
        await self._db(self.store.record_calls, rows)
        settle_spend(job.held_usd, sum(r.get("cost_usd") or 0.0 for r in rows))
        job.held_usd = 0.0
        await self._db(self.store.update_batch, job.record.id, status=polled.status, counts=polled.counts)
        if job.advance is not None and len(job.calls) > job.seen:
            job.advance(len(job.calls) - job.seen)
        return failed

    async def _lost(self, job: Job) -> set[str]:
        """A job the endpoint no longer knows: its calls failed (asked again), its record closed as lost."""
        rows, failed = self._settle(job, [], missing=f"batch {job.batch_id} is unknown to {job.record.endpoint}")
        await self._db(self.store.record_calls, rows)
        settle_spend(job.held_usd, 0.0)
        job.held_usd = 0.0
        await self._db(self.store.update_batch, job.record.id, status="lost")
        return failed

    def _settle(self, job: Job, lines: list[Any], *, missing: str) -> tuple[list[dict[str, Any]], set[str]]:
        """Return the ledger rows of a job's reply lines (a failed row for each call with none) and the failed keys."""
        rows, failed, replied = [], set(), set()
        for line in lines:
            call = job.calls.get(line.custom_id) if isinstance(line, ReplyLine) else None
            if call is None or line.custom_id in replied:
                continue  # not this job's (or a second reply to one call): nothing to write
            replied.add(line.custom_id)
            row, comp = settle(line.custom_id, call, line)
            row.update(stage=current_stage(), batch=True)
            if comp is not None:
                row["cost_usd"] = call_cost(self.engine.spec, comp.tokens_in, comp.tokens_out, batch=True)
            rows.append(row)
            self._count(line.custom_id, comp, row)
            if comp is None:
                failed.add(line.custom_id)
        for key, call in job.calls.items():
            if key not in replied:
                row = {"key": key, "engine": call.engine, "model": call.model, "requested_by": call.requested_by,
                       "request_json": call.request_json, "status": "error", "error": f"batch line failed: {missing}",
                       "stage": current_stage(), "batch": True}
                rows.append(row)
                self._count(key, None, row)
                failed.add(key)
        return rows, failed

    def _count(self, key: str, comp: Completion | None, row: dict[str, Any]) -> None:
        stats = self.stats
        stats.sent += 1
        self.results[key] = comp
        if comp is None:
            stats.failed += 1
            self.errors[key] = str(row["error"])
            return
        stats.ok += 1
        stats.empty += is_empty(comp)
        stats.truncated += is_truncated(comp)
        stats.tokens_in += comp.tokens_in
        stats.tokens_out += comp.tokens_out


class OpenAIJobs:
    """OpenAI's Batch API: each job's input uploaded through the Files API, the job created with its record's id in
    ``metadata`` (found by listing the jobs if killed before its id was stored), its output and error files read
    back; on one ``openai`` client per endpoint URL."""

    def __init__(self, engine: OpenAIEngine):
        import openai

        self.engine, self.settings = engine, engine.spec.batch
        self.endpoint = engine.endpoints[0].base_url
        self.errors: type[Exception] = openai.OpenAIError
        self.not_found: type[Exception] = openai.NotFoundError
        self.clients: dict[str, AsyncOpenAI] = {}

    def item(self, key: str, request: Request, params_json: str) -> tuple[BatchCall, bytes]:
        path, body = self.engine.wire(request)
        call = batch_call(self.engine, request, params_json, BATCH_URLS[path])
        return call, request_line(key, call.url, body)

    def _client(self, url: str) -> AsyncOpenAI:
        if url not in self.clients:
            from openai import AsyncOpenAI

            # the key is the engine's (api_key_env); a local server takes any
            self.clients[url] = AsyncOpenAI(base_url=url, api_key=self.engine.api_key or "none",
                                            max_retries=self.engine.spec.max_retries,
                                            timeout=self.engine.spec.timeout_s)
        return self.clients[url]

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()

    async def submit(self, job: Job, save: Callable[..., Awaitable[None]]) -> str:
        client = self._client(job.record.endpoint)
        if job.file_id is None:
            data = b"".join(line + b"\n" for line in job.lines or [])
            uploaded = await client.files.create(file=(f"{job.record.id}.jsonl", data), purpose="batch")
            job.file_id = uploaded.id
            await save(file_id=uploaded.id)
        created = await client.batches.create(
            input_file_id=job.file_id, endpoint=job.url,  # type: ignore[arg-type]  # one of BATCH_URLS
            completion_window=self.settings.window,  # type: ignore[arg-type]  # "24h" on OpenAI; others vary
            metadata={"arena_batch": job.record.id, "arena_model": job.record.model})
        return created.id

    async def find(self, record: BatchRecord) -> str | None:
        async for batch in self._client(record.endpoint).batches.list(limit=100):
            if (batch.metadata or {}).get("arena_batch") == record.id:
                return batch.id
            if batch.created_at < record.created_at - 3600:  # newest first: older ones cannot be it
                return None
        return None

    async def poll(self, job: Job) -> Polled:
        batch = await self._client(job.record.endpoint).batches.retrieve(job.batch_id or "")
        counts = batch.request_counts
        return Polled(batch.status, batch.status in FINAL, (counts.completed + counts.failed) if counts else 0,
                      counts.model_dump() if counts is not None else None, batch)

    async def replies(self, job: Job, polled: Polled) -> tuple[list[ReplyLine | BadLine], str | None]:
        batch, client = polled.job, self._client(job.record.endpoint)
        texts = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                texts.append((await client.files.content(file_id)).text)
        why = {"expired": "batch_expired", "cancelled": "batch_cancelled", "failed": "batch_failed"}.get(batch.status)
        if batch.status == "failed" and batch.errors is not None and batch.errors.data:
            first = batch.errors.data[0]
            why = f"batch_failed: {first.code}: {first.message} (line {first.line})"
        return [line for text in texts for line in read_replies(text)], why


def split(lines: list[tuple[str, BatchCall, bytes]], max_requests: int, max_bytes: int
          ) -> list[list[tuple[str, BatchCall, bytes]]]:
    """Return ``lines`` cut in order into chunks of at most ``max_requests`` lines and ``max_bytes`` bytes (a line
    longer than ``max_bytes`` alone in its chunk)."""
    chunks: list[list[tuple[str, BatchCall, bytes]]] = []
    size = 0
    for item in lines:
        n = len(item[2]) + 1
        if not chunks or len(chunks[-1]) >= max_requests or (chunks[-1] and size + n > max_bytes):
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += n
    return chunks


def job_id(model_id: str, url: str, keys: list[str], taken: set[str]) -> str:
    """Return the deterministic id of a job: a hash of the model, the endpoint and its calls' sorted ledger keys,
    and a try number that no job recorded here has (``taken``: the ids recorded)."""
    h = hashlib.sha256(f"{model_id}\n{url}\n".encode())
    for key in sorted(keys):
        h.update(key.encode())
    base = f"arena-{h.hexdigest()[:24]}"
    n = 0
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


__all__ = ["BATCH_URLS", "FINAL", "Capture", "capturing", "routed", "run_batches"]
