"""How long llama.cpp calls take on this machine: rates measured on a model's own prompts, and the minutes
``arena plan`` predicts from them.

The batched context (``llama_batcher``) spends its time in two kinds of ``llama_decode`` calls, and what a call
costs does not depend on what shares the batch (the same property that makes an answer a function of its request
alone):

- a prompt chunk: at most PROMPT_CHUNK tokens of one prompt, alone in its call: ``chunk_s + token_s x n``;
- a decode step: exactly ``parallel`` rows, padding included, so every step costs the same: ``step_s``.

So a list of calls costs the sum over its chunks, plus its steps x ``step_s``, plus a little Python per call
(``call_s``). The chunks are what each prompt evaluates past the whole chunks a slot already holds: the batcher's
own prefix rule, replayed over the plan's requests in order (a few-shot prefix or a judge template is evaluated
once per process, then reused). The steps come from the tokens the calls write, shared among the slots.

``measure`` runs a model on prompts (``arena plan --measure``: the plan's own test prompts) and fits the rates
from the batcher's counters. They are kept per machine (CPU model, the cores this process may use) in the cache's
``rates.json``, keyed by what sets the cost: the GGUF's architecture, tensor type and size (within 10%), threads
and parallel. A model measured once times every file of its shape: a flywheel's students, exported to GGUF, share
the exported base model's.

What nothing can know before a run is how many tokens each answer writes. The plan takes the mean of what the
same model wrote under the same prompt settings before: in the workspace's ledger, else in the measurement; with
neither, ``max_tokens`` (an upper bound, and the line says so).

The one-at-a-time path (``parallel: 1``, unseeded samples) and engines outside this process (HTTP endpoints) are
not timed: their lines say so.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import write_json
from .base import Request, available_cores
from .cache import cache_dir
from .llama_batcher import PROMPT_CHUNK

if TYPE_CHECKING:
    from ..config import ModelSpec
    from ..store import Store
    from .llamacpp import LlamaCppEngine

RATES_FILE = "rates.json"
VERSION = 1
SIZE_TOLERANCE = 0.10
"""A measured model times another file of the same architecture and tensor type whose size is within this share."""

MIN_HISTORY = 5
"""Calls of the same model and prompt settings the ledger must hold before their mean output length is used."""


@dataclass
class Rates:
    """One model shape's costs on one machine (seconds)."""

    arch: str
    ftype: int
    size_bytes: int
    threads: int
    parallel: int
    chunk_s: float  # a prompt chunk's fixed cost
    token_s: float  # and its cost per token
    step_s: float  # one decode step of ``parallel`` rows
    call_s: float  # Python per call (tokenising, the future, the bookkeeping)
    load_s: float  # loading the model and making its batched context
    model: str = ""  # the file measured (for people)
    prompts: int = 0
    measured_at: str = ""

    def fits(self, arch: str, ftype: int, size: int, threads: int, parallel: int) -> bool:
        return (self.arch, self.ftype, self.threads, self.parallel) == (arch, ftype, threads, parallel) and \
            abs(self.size_bytes - size) <= SIZE_TOLERANCE * max(size, 1)


@functools.cache
def machine_id() -> str:
    """Return this machine as rates know it: the CPU's model name and the cores this process may use (read once
    a process: a plan looks it up for every line)."""
    from .llama_check import cpu_info

    return f"{cpu_info()['model']} | {available_cores()} cores"


def rates_path() -> Path:
    """Return the rates file: ``$ARENA_RATES``, else ``rates.json`` in the arena's cache."""
    env = os.environ.get("ARENA_RATES")
    return Path(env) if env else cache_dir() / RATES_FILE


def load_table(path: Path | None = None) -> dict[str, Any]:
    """Return the rates file ({version, machines: {machine: [Rates]}, outputs: {key: [mean, n]}}); empty if none."""
    path = path or rates_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"version": VERSION, "machines": {}, "outputs": {}}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {"version": VERSION, "machines": {}, "outputs": {}}
    # another writer's keys (training, exports, yields) are kept as they are
    data.setdefault("machines", {})
    data.setdefault("outputs", {})
    return data


def save_rates(rates: Rates, outputs: dict[str, tuple[float, int]], path: Path | None = None) -> None:
    """Add ``rates`` (replacing the same shape's) and the measured output lengths to the rates file."""
    same = rates.arch, rates.ftype, rates.size_bytes, rates.threads, rates.parallel

    def change(data: dict[str, Any]) -> None:
        old = [Rates(**r) for r in data["machines"].get(machine_id(), [])]
        if rates.load_s == 0.0:  # measured on a model this process had loaded: the load time measured before stands
            rates.load_s = max((r.load_s for r in old if r.fits(*same)), default=0.0)
        data["machines"][machine_id()] = [*(asdict(r) for r in old if not r.fits(*same)), asdict(rates)]
        data["outputs"].update({k: list(v) for k, v in outputs.items()})

    _update(path, change, strict=True)


def shape(engine: LlamaCppEngine) -> tuple[str, int, int]:
    """Return what sets a llama.cpp model's cost: (architecture, GGUF file type, file size)."""
    from .bundled import resolve_model_path

    meta = engine.llm.metadata
    path = resolve_model_path(engine.spec.model)
    return str(meta.get("general.architecture", "?")), int(meta.get("general.file_type", -1)), path.stat().st_size


def find(table: dict[str, Any], engine: LlamaCppEngine) -> Rates | None:
    """Return this machine's rates for ``engine``'s model shape, threads and parallel (None: not measured)."""
    arch, ftype, size = shape(engine)
    threads = engine.spec.n_threads or available_cores()
    fits = [Rates(**r) for r in table["machines"].get(machine_id(), [])]
    fits = [r for r in fits if r.fits(arch, ftype, size, threads, engine.spec.parallel)]
    return min(fits, key=lambda r: abs(r.size_bytes - size)) if fits else None


def signature(spec: ModelSpec) -> str:
    """Return what sets how much a model writes besides its weights: mode, prompt format, system prompt, params."""
    blob = json.dumps({"mode": spec.mode, "format": spec.prompt_format.model_dump(mode="json"),
                       "system": spec.system_prompt, "params": spec.params.model_dump(mode="json"),
                       "chat": [spec.chat_format, spec.chat_template]}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def output_key(engine: LlamaCppEngine, spec: ModelSpec) -> str:
    return f"{engine.model_id}|{signature(spec)}"


# ---- measuring ---------------------------------------------------------------------------------------------


async def _complete_all(engine: LlamaCppEngine, requests: Sequence[Request]) -> list[Any]:
    engine.expect(requests)
    gate = asyncio.Semaphore(max(1, engine.in_flight))

    async def one(r: Request) -> Any:
        async with gate:
            return await engine.complete(r)

    try:
        return await asyncio.gather(*(one(r) for r in requests))
    finally:
        engine.expect_done()


def _fit(sums: Sequence[float]) -> tuple[float, float]:
    """Return (a, b) of seconds = a + b x tokens, least squares over the chunks' sums (both at least 0)."""
    n, sx, sxx, st, sxt = sums
    if n <= 0:
        return 0.0, 0.0
    den = n * sxx - sx * sx
    b = (n * sxt - sx * st) / den if den > 1e-9 else 0.0
    a = (st - b * sx) / n
    if b < 0:
        return st / n, 0.0
    if a < 0:
        return 0.0, sxt / sxx if sxx else 0.0
    return a, b


def measure(spec: ModelSpec, requests: Sequence[Request], *, decode_tokens: int = 24) -> tuple[Rates, float]:
    """Time ``spec`` (a batched llama.cpp model) answering ``requests`` (``arena plan``: the first turns of its own
    test prompts), then writing ``decode_tokens`` tokens on ``2 x parallel`` of them; return its rates and the mean
    tokens it wrote.

    Nothing goes to a ledger: the calls are made on the engine directly. A model loaded before in this process
    reports the load time it took then (``load_s`` is only measured on a first load)."""
    from . import build_engine
    from .llamacpp import LlamaCppEngine, is_loaded, load_batcher

    loaded = spec.engine == "llamacpp" and is_loaded(spec)
    t0 = time.perf_counter()
    engine = build_engine(spec)
    if not isinstance(engine, LlamaCppEngine) or spec.parallel < 2:
        raise ValueError(f"model {spec.name!r}: only batched llama.cpp models (parallel > 1) are measured")
    batcher = load_batcher(spec)
    load_s = 0.0 if loaded else time.perf_counter() - t0
    requests = [r for r in requests if engine.batched(r)]
    if not requests:
        raise ValueError(f"model {spec.name!r}: none of its requests is batched (greedy or seeded)")

    def counters() -> list[float]:
        return [*batcher.prefill_fit, batcher.decode_s, batcher.decode_steps, batcher.prefill_s]

    before = counters()
    t1 = time.perf_counter()
    outs = asyncio.run(_complete_all(engine, requests))
    wall = time.perf_counter() - t1
    mid = counters()
    long = [r.model_copy(update={"params": {**r.params, "stop": [], "max_tokens": decode_tokens}})
            for r in requests[: 2 * spec.parallel]]
    asyncio.run(_complete_all(engine, long))
    after = counters()
    d1 = [m - b for m, b in zip(mid, before)]
    chunk_s, token_s = _fit([a - b for a, b in zip(after[:5], before[:5])])
    steps = after[6] - before[6]
    step_s = (after[5] - before[5]) / steps if steps else 0.0
    call_s = max(0.0, (wall - d1[7] - d1[5]) / len(requests))
    arch, ftype, size = shape(engine)
    rates = Rates(arch=arch, ftype=ftype, size_bytes=size, threads=spec.n_threads or available_cores(),
                  parallel=spec.parallel, chunk_s=round(chunk_s, 6), token_s=round(token_s, 7),
                  step_s=round(step_s, 6), call_s=round(call_s, 6), load_s=round(load_s, 3),
                  model=engine.model_id, prompts=len(requests),
                  measured_at=datetime.now(UTC).isoformat(timespec="seconds"))
    mean_out = sum(c.tokens_out for c in outs) / len(outs)
    return rates, mean_out


# ---- predicting ---------------------------------------------------------------------------------------------


@dataclass
class Slots:
    """The prompts a batched context's slots hold (whole chunks), replayed as the batcher admits: a prompt reuses
    the longest run of whole chunks any slot holds, then takes the place of the oldest."""

    size: int
    held: deque[list[int]] = field(default_factory=deque)

    def evaluate(self, tokens: Sequence[int]) -> tuple[int, int]:
        """Return (chunks, tokens) ``tokens`` evaluates past what a slot holds, and hold it."""
        best = 0
        for h in self.held:
            n = 0
            for x, y in zip(h, tokens):
                if x != y:
                    break
                n += 1
            best = max(best, n)
        keep = min(best, len(tokens) - 1)
        keep -= keep % PROMPT_CHUNK
        held = list(tokens[: len(tokens) - len(tokens) % PROMPT_CHUNK])
        self.held.append(held)
        while len(self.held) > self.size:
            self.held.popleft()
        return chunks_between(keep, len(tokens)), len(tokens) - keep


def chunks_between(start: int, end: int) -> int:
    """Return the prompt chunks that evaluate positions start..end (chunks end at multiples of PROMPT_CHUNK)."""
    if end <= start:
        return 0
    return (end - 1) // PROMPT_CHUNK - start // PROMPT_CHUNK + 1


@dataclass
class Job:
    """A call as the plan sees it: its prompt tokens (None: not known yet, then ``n_tokens`` is an estimate),
    and the tokens it is expected to write."""

    tokens: list[int] | None
    n_tokens: int
    out: float


def predict(rates: Rates, jobs: Sequence[Job], slots: Slots) -> float:
    """Return the seconds ``jobs`` take through a batched context with ``rates``, in order (``slots``: what the
    context holds before; updated)."""
    if not jobs:
        return 0.0
    seconds = 0.0
    for j in jobs:
        if j.tokens is not None:
            chunks, n = slots.evaluate(j.tokens)
        else:  # text not known yet (a later turn): all of it new
            chunks, n = chunks_between(0, j.n_tokens), j.n_tokens
        seconds += chunks * rates.chunk_s + n * rates.token_s + rates.call_s
    outs = [max(1.0, j.out) for j in jobs]
    p = rates.parallel
    steps = max(outs) if len(outs) <= p else math.ceil(sum(outs) / p) + sum(outs) / len(outs)
    return seconds + steps * rates.step_s


class Timing:
    """What a plan times its lines with: this machine's rates, the ledger's history of output lengths, and each
    model's slots (a process keeps its contexts: a prefix evaluated in one phase is held in the next)."""

    def __init__(self, store: Store | None, table: dict[str, Any] | None = None):
        self.store = store
        self.table = table if table is not None else load_table()
        self.slots: dict[tuple[str, int], Slots] = {}
        self.loaded: set[tuple[str, int]] = set()
        self.missing: dict[str, str] = {}  # model name -> why it is not timed

    def expected_out(self, engine: LlamaCppEngine, spec: ModelSpec, max_tokens: int) -> tuple[float, str]:
        """Return the tokens a call of ``spec`` is expected to write, and where that figure comes from."""
        if self.store is not None:
            n, mean = self.store.output_history(engine.model_id, spec.name)
            if n >= MIN_HISTORY and mean is not None:
                return min(mean, max_tokens), f"the ledger's {n} calls"
        got = self.table["outputs"].get(output_key(engine, spec))
        if got:
            return min(float(got[0]), max_tokens), "the measurement"
        return float(max_tokens), "max_tokens (an upper bound: nothing measured)"

    def seconds(self, engine: Any, spec: ModelSpec, jobs: Sequence[tuple[list[int] | None, int, int]]
                ) -> tuple[float | None, str]:
        """Return the seconds of ``jobs`` ((tokens or None, estimated prompt tokens, max_tokens) each) on
        ``engine``, with a note (None: not timed, and why)."""
        from .llamacpp import LlamaCppEngine

        if not isinstance(engine, LlamaCppEngine):
            return None, "not timed: only llama.cpp models in this process are"
        if engine.spec.parallel < 2:
            return None, "not timed: parallel 1 (one at a time) is not measured"
        rates = find(self.table, engine)
        if rates is None:
            self.missing[spec.name] = engine.model_id
            return None, "not timed: no rates measured on this machine (arena plan --measure)"
        if not jobs:
            return 0.0, ""
        max_tokens = max(m for _, _, m in jobs)
        out, source = self.expected_out(engine, spec, max_tokens)
        key = (str(engine.model_id), engine.spec.parallel)
        slots = self.slots.setdefault(key, Slots(engine.spec.parallel))
        seconds = predict(rates, [Job(t, n, min(out, m)) for t, n, m in jobs], slots)
        if key not in self.loaded:
            self.loaded.add(key)
            seconds += rates.load_s
        return seconds, f"{out:.1f} tokens written a call ({source})"


# ---- training: seconds a step and a stage's fixed cost, recorded by the flywheel's own stages -------------------

HISTORY = 20
"""Stages of one key kept (the newest) for its training rates and its harvest yield."""

NO_COST = {"learning_rate", "epochs", "max_steps", "lr_scheduler", "warmup_ratio", "weight_decay", "save_steps",
           "logging_steps", "seed", "beta", "loss_type", "loss_weights", "label_smoothing", "ld_alpha", "start",
           "use_margin"}
"""Training settings that change what a step learns but not what it costs."""


def training_key(target: str, kind: str, settings: Any, launch: Any) -> str:
    """Return the key of a training run's cost: the model it starts from, the kind and the settings that cost."""
    blob = json.dumps({"target": target, "kind": kind,
                       "settings": {k: v for k, v in settings.model_dump(mode="json").items() if k not in NO_COST},
                       "launch": launch.model_dump(mode="json")}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _update(path: Path | None, change: Any, *, strict: bool = False) -> None:
    """Apply ``change`` to the rates file and write it whole (two processes at once: the last wins; each record is
    a measurement). A read-only cache only costs the next plan its minutes, unless ``strict`` (a measurement the
    user asked for: the error says so)."""
    path = path or rates_path()
    data = load_table(path)
    change(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, data)
    except OSError:
        if strict:
            raise


def record_training(key: str, steps: int, seconds: float, s_per_step: float | None, path: Path | None = None) -> None:
    """Add a finished training run to this machine's record under ``key``: ``steps`` optimizer steps of
    ``s_per_step`` each (the trainer's timer), ``seconds`` in all (loading and saving included)."""
    if steps <= 0 or not s_per_step:
        return

    def change(data: dict[str, Any]) -> None:
        runs = data.setdefault("training", {}).setdefault(machine_id(), {}).setdefault(key, [])
        runs.append([steps, round(seconds, 2), round(s_per_step, 4)])
        del runs[:-HISTORY]

    _update(path, change)


def record_export(key: str, seconds: float, path: Path | None = None) -> None:
    """Add the seconds one GGUF export of a trained model took (``key``: the target and tensor type)."""
    def change(data: dict[str, Any]) -> None:
        runs = data.setdefault("exports", {}).setdefault(machine_id(), {}).setdefault(key, [])
        runs.append(round(seconds, 2))
        del runs[:-HISTORY]

    _update(path, change)


def record_yield(key: str, examples: int, prompts: int, path: Path | None = None) -> None:
    """Add a harvest (``examples`` from a slice of ``prompts``) under ``key`` (its selection's settings)."""
    if prompts <= 0:
        return

    def change(data: dict[str, Any]) -> None:
        runs = data.setdefault("yields", {}).setdefault(key, [])
        runs.append([examples, prompts])
        del runs[:-HISTORY]

    _update(path, change)


def training_rates(table: dict[str, Any], key: str) -> tuple[float, float] | None:
    """Return (fixed seconds, seconds a step) of this machine's runs under ``key``, their means (None: none yet).

    The fixed cost is what a run spends outside its steps: loading the model, setting LoRA up, saving."""
    runs = table.get("training", {}).get(machine_id(), {}).get(key)
    if not runs:
        return None
    per_step = sum(r[2] for r in runs) / len(runs)
    fixed = sum(max(0.0, r[1] - r[0] * r[2]) for r in runs) / len(runs)
    return fixed, per_step


def export_seconds(table: dict[str, Any], key: str) -> float | None:
    runs = table.get("exports", {}).get(machine_id(), {}).get(key)
    return sum(runs) / len(runs) if runs else None


def harvest_yield(table: dict[str, Any], key: str) -> float | None:
    """Return the share of slice prompts that became data under ``key`` (None: no harvest recorded)."""
    runs = table.get("yields", {}).get(key)
    if not runs:
        return None
    return sum(e for e, _ in runs) / max(1, sum(p for _, p in runs))
