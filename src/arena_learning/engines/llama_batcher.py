"""Continuous batching for llama.cpp: many completions (greedy or seeded samples) decoded together, each answer a
function of its request alone.

Decoding one sequence reads every weight once per token; a step that decodes ``size`` sequences
reads them once for all of them. A :class:`Batcher` owns a llama.cpp context of its own (beside the
``Llama``'s, which the one-at-a-time path keeps) with ``size`` slots. A slot that stops (end of
generation, a stop string, its ``max_tokens``) hands its future its completion and takes the next
queued request at once.

What a row computes must not depend on what shares its batch (issue 36: before, 5-7 of 36 quickstart
answers changed with the order or the companions). Three things leaked, and each is closed:

- where a sequence's KV cells sit: each slot has a KV stream of its own (``kv_unified = false``,
  ``n_seq_max = size``), so its cells are at the same places whatever the other slots hold;
- the kernels a row goes through: every decode step has exactly ``size`` rows, row i always slot i's, a
  padding row (removed after) in every idle slot, and every row's logits computed (the last layer and the
  output head run on the rows that give logits), so the products have the same shape at every step;
- how a prompt is cut: a prompt is evaluated alone, one chunk per call, in chunks ending at multiples of
  PROMPT_CHUNK positions, and a prefix held by any slot (a few-shot prefix, a chat template's preamble) is
  reused only as whole chunks, copied stream to stream: exactly the cells evaluating it would make, so a
  warm prefix cache gives the numbers of a cold one.

Text, stops and token counts follow ``Llama.create_completion`` exactly (the same stop-string,
multi-byte and ``max_tokens`` rules). The logits are not the one-at-a-time path's (a step of ``size``
rows goes through other kernels than a step of one, which round their last bits otherwise, and can flip a
near-tie), so the engine keys batched calls apart in the ledger (``DECODING``).

A seeded sample (temperature > 0) draws its tokens here with a sampler of its own, llama.cpp's
default chain written out in numpy (top-k 40, top-p, min-p 0.05, temperature, then a draw), from a
generator seeded by the request's seed and its prompt alone (so two prompts sampled with one seed
draw independent streams, where llama.cpp's seeded sampler gives every prompt the same one).

A request with a grammar (a JSON schema's, or one a chat handler chose) carries its GBNF text; its slot gets a
llama.cpp grammar sampler of its own, which masks the logits before the pick and accepts every token picked.
Greedy, the best token is checked alone first and the whole vocabulary masked only when the grammar refuses it
(the best allowed token either way: a refused best is the only case where masking changes the argmax).

A caller that knows its list (``arun_requests``) announces it (``expect``): admission then waits until the
queue holds a job for every free slot or the announced list is all in, so steps are full however the
caller's threads get to submit (speed only: answers never depend on the schedule). Unannounced jobs
(``arena serve``'s clients) are admitted as they come.

Every call runs on the engine's one worker thread (ggml's thread team, see ``llamacpp``).
"""

from __future__ import annotations

import ctypes
import threading
import time
import warnings
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EngineError
from .base import CallFailed, Completion

DECODING = "batched-v2"
"""The batched decoding's name in its calls' ledger keys (with the row count): v2, answers a function of the request
alone (one KV stream a slot, fixed rows, prompts in fixed chunks); v1 (keyed ``sampler``) depended on the batch."""

PROMPT_CHUNK = 32
"""Prompt tokens are evaluated in chunks that end at multiples of this many positions, one sequence's chunk per
decode call: a prompt's cells come out the same whatever its slot held before, and a prefix held as whole
chunks is reused by any prompt that starts with it (the same cells it would compute). A fixed number, never
one chosen from the machine."""

ARRIVAL_WAIT_S = 2.0
"""How long admission waits for an announced job before going on without it: a safety net for a caller
that announced a job and never submits it (a submission blocked behind this worker), never reached when
the caller keeps its window of jobs in flight (the next job arrives within milliseconds)."""


@dataclass
class Job:
    """One completion to decode: prompt tokens, stops, how tokens are picked and where the result goes."""

    tokens: list[int]
    max_tokens: int
    stops: list[bytes]
    sampling: Sampling | None = None  # None: greedy (the logits' best)
    grammar: str | None = None  # GBNF (root rule ``root``) every picked token must follow; None: any token
    future: Future = field(default_factory=Future)
    on_text: Callable[[bytes], None] | None = None  # called on the worker with the output so far, as it grows
    start: float = field(default_factory=time.perf_counter)
    abandoned: bool = False  # the caller went away (a closed stream): its slot is freed at the next step
    announced: bool = False  # one of the jobs a caller announced with ``Batcher.expect``
    picked: list[int] = field(default_factory=list)  # every token the logits picked, end-of-generation included

    def gone(self) -> bool:
        return self.abandoned or self.future.cancelled()


@dataclass
class Sampling:
    """A seeded sample's settings: llama.cpp's default chain (``Llama.create_completion``'s top_k 40, min_p 0.05)."""

    temperature: float
    seed: int
    top_p: float = 1.0
    top_k: int = 40
    min_p: float = 0.05
    salt: int = 0  # the prompt's (``prompt_salt``): each prompt draws its own stream, not every prompt the same one
    rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng([self.seed % 2**32, self.salt % 2**32])

    def pick(self, logits: np.ndarray) -> int:
        """Return the token drawn from ``logits``: top-k, top-p, min-p, temperature, then one draw (that order)."""
        z = logits.astype(np.float64)
        k = min(self.top_k, z.size) if self.top_k > 0 else z.size
        top = np.argpartition(-z, k - 1)[:k]
        top = top[np.lexsort((top, -z[top]))]  # best first; equal logits by token id, so the order never varies
        zs = z[top]
        p = np.exp(zs - zs[0])
        p /= p.sum()
        if self.top_p < 1.0:  # the fewest best tokens whose probability reaches top_p (at least one)
            keep = int(np.searchsorted(np.cumsum(p), self.top_p)) + 1
            zs, top = zs[:keep], top[:keep]
        if self.min_p > 0.0:  # tokens at least min_p times as likely as the best
            keep = int(np.count_nonzero(zs >= zs[0] + np.log(self.min_p)))
            zs, top = zs[:max(1, keep)], top[:max(1, keep)]
        w = np.exp((zs - zs[0]) / self.temperature)
        cdf = np.cumsum(w / w.sum())
        return int(top[min(int(np.searchsorted(cdf, self.rng.random(), side="right")), top.size - 1)])


@dataclass
class _Slot:
    seq: int
    cached: list[int] = field(default_factory=list)  # tokens whose KV this sequence holds, in order
    reusable: int = 0  # the first cached tokens evaluated as whole prompt chunks (another prompt may reuse them)
    pending: list[int] = field(default_factory=list)  # tokens to evaluate next
    job: Job | None = None
    out: list[int] = field(default_factory=list)
    pieces: list[bytes] = field(default_factory=list)
    multibyte_fix: int = 0
    grammar: Any = None  # the job's llama.cpp grammar sampler (freed when the job ends)


def prompt_salt(tokens: list[int]) -> int:
    """Return a sample's stream salt from its prompt tokens (CRC-32: the same prompt, the same salt, anywhere)."""
    return zlib.crc32(np.asarray(tokens, dtype=np.int64).tobytes())


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def context_params(llm: Any, size: int, n_ctx_seq: int, n_batch: int) -> Any:
    """Return ``llm``'s context parameters (rope, attention, threads) for ``size`` sequences of ``n_ctx_seq`` cells,
    each in a KV stream of its own, at most ``n_batch`` rows a call (the batcher's context; its benchmarks build the
    same)."""
    import llama_cpp as lc

    params = lc.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_ctx = size * n_ctx_seq
    params.n_seq_max = size
    params.kv_unified = False
    params.n_batch = params.n_ubatch = n_batch
    params.n_threads_batch = params.n_threads  # the configured threads for every step
    params.no_perf = True
    return params


class Batcher:
    """Decodes up to ``size`` completions of one ``Llama`` together (continuous batching), each a function of
    its own request alone.

    ``submit`` queues a :class:`Job` and returns its future; the decode loop runs on ``worker`` while
    there is work, and ends when the queue and the slots are empty.
    """

    def __init__(self, llm: Any, size: int, n_ctx_seq: int, worker: Any):
        import llama_cpp as lc

        self._lc = lc
        self.llm = llm
        self.size = size
        self.n_ctx_seq = n_ctx_seq
        self.worker = worker
        # The Llama's own settings (rope, attention), with one KV stream of n_ctx_seq cells per slot: a
        # sequence's cells are its own, at the same places whatever the other slots hold.
        ctx = lc.llama_init_from_model(llm._model.model, context_params(llm, size, n_ctx_seq, max(size, PROMPT_CHUNK)))
        if not ctx:
            raise EngineError(f"llama.cpp could not make a context of {size} sequences of {n_ctx_seq} cells "
                              "(lower parallel or n_ctx)")
        self.ctx = ctx
        self.mem = lc.llama_get_memory(ctx)
        self.batch = lc.llama_batch_init(max(size, PROMPT_CHUNK), 0, 1)
        self.vocab = llm._model.vocab
        self.n_vocab = int(llm.n_vocab())
        self.bos = int(llm.token_bos())
        self.slots = [_Slot(i) for i in range(size)]
        # Candidates for a grammar to mask: every token id with its logit (llama_token_data: id, logit, p), filled
        # afresh by each _mask.
        self._candidates = np.zeros(self.n_vocab, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
        self._one = np.zeros(1, dtype=self._candidates.dtype)
        self.queue: deque[Job] = deque()
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)  # a job was submitted, or announced ones withdrawn
        self.expected = 0  # announced jobs (``expect``) not submitted yet
        self.running = False
        self.closed = False
        self.steps = 0  # decode calls made
        self.evaluated = 0  # tokens decoded (prompt tokens evaluated once for a shared prefix; no padding rows)
        self.peak = 0  # the most sequences decoded in one step
        # Decode steps (every generating sequence adds one token; padding rows not counted) apart from prefill
        # steps (one prompt chunk each): the decode-only rate is decode_tokens / decode_s, each step timed whole.
        self.decode_steps = 0
        self.decode_tokens = 0
        self.decode_s = 0.0
        self.prefill_steps = 0
        self.prefill_tokens = 0  # prompt tokens evaluated (a shared prefix once)
        self.prefill_s = 0.0
        # Sums for a least-squares fit of a prompt chunk's seconds to its tokens (a + b n: ``engines.speed``):
        # chunks, sum n, sum n^2, sum seconds, sum n x seconds.
        self.prefill_fit = [0.0] * 5
        self.undecodable = 0  # bytes of answers that were not UTF-8, left out of their text (``decode_answer``)

    # ---- the caller's side -------------------------------------------------------------------

    def expect(self, n: int) -> None:
        """Announce ``n`` jobs about to be submitted (``Job.announced``).

        Until they are all in, a step admits only when the queue holds a job for every free slot: the slots fill
        up (speed) however the caller's threads are scheduled. Answers never depend on it.
        """
        with self.lock:
            if n > 0:
                self.expected += n

    def withdraw(self, n: int) -> None:
        """Take back ``n`` announced jobs that will not be submitted (they failed first, or the caller ended)."""
        with self.lock:
            self.expected = max(0, self.expected - n)
            self.arrived.notify_all()

    def submit(self, job: Job) -> Future:
        """Queue ``job``; its future gets a :class:`Completion` or a CallFailed."""
        with self.lock:
            if self.closed:
                raise CallFailed("llama.cpp: the model was closed")
            if job.announced:
                self.expected = max(0, self.expected - 1)
            self.queue.append(job)
            self.arrived.notify_all()
            if not self.running:
                self.running = True
                self.worker.submit(self._run)
        return job.future

    def close(self) -> None:
        """Free the context (at exit, before the model)."""
        with self.lock:
            self.closed = True
            self.arrived.notify_all()
            if self.ctx is not None:
                self._lc.llama_batch_free(self.batch)
                self._lc.llama_free(self.ctx)
                self.ctx = None

    # ---- the worker's side ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self.lock:
                    if self.closed or (not self.queue and all(s.job is None for s in self.slots)):
                        self.running = False
                        return
                self._step()
        except BaseException as err:
            failure = err if isinstance(err, CallFailed) else CallFailed(f"llama.cpp: {err!r}")
            with self.lock:
                jobs = [s.job for s in self.slots if s.job is not None] + list(self.queue)
                self.queue.clear()
                for s in self.slots:
                    self._release(s)
                    s.job, s.cached, s.pending, s.reusable = None, [], [], 0
                if self.ctx is not None:
                    self._lc.llama_memory_clear(self.mem, True)
                self.running = False
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(failure)

    @staticmethod
    def _reuse(s: _Slot, tokens: list[int], held: list[int] | None = None) -> int:
        """Return how many of ``tokens`` slot ``s`` holds as whole prompt chunks (a multiple of PROMPT_CHUNK,
        leaving at least one token to evaluate): cells computed exactly as evaluating ``tokens`` would. With
        ``held``: how many it will hold once it has evaluated the prompt ``held``."""
        whole = s.cached[:s.reusable] if held is None else held[:len(held) - len(held) % PROMPT_CHUNK]
        n = min(_lcp(whole, tokens), len(tokens) - 1)
        return n - n % PROMPT_CHUNK

    def _admit(self) -> None:
        """Give queued jobs free slots, reusing the longest run of whole prompt chunks any slot holds."""
        lc = self._lc
        while True:
            free = [s for s in self.slots if s.job is None]
            with self.lock:
                if not free:
                    return
                # Announced jobs still to come: wait until there is one for every free slot (or all are in).
                deadline = time.monotonic() + ARRIVAL_WAIT_S
                while self.expected > 0 and len(self.queue) < len(free) and not self.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.arrived.wait(left)
                if not self.queue:
                    return
                job = self.queue.popleft()
            if job.gone():
                continue
            tokens = job.tokens
            # A prompt another slot is evaluating now shares more whole chunks than any slot holds: wait for them
            # (the queue stays in order) rather than evaluate them twice.
            held = max(self._reuse(s, tokens) for s in self.slots)
            coming = max((self._reuse(s, tokens, s.job.tokens) for s in self.slots
                          if s.job is not None and s.pending and not s.job.picked), default=0)
            if coming > held:
                with self.lock:
                    self.queue.appendleft(job)
                return
            # The free slot holding the longest reusable prefix itself; another slot's if it holds a longer one
            # (a stream is copied whole, then cut back: the copied cells are the ones evaluating would make).
            slot = max(free, key=lambda s: self._reuse(s, tokens))
            keep = self._reuse(slot, tokens)
            source = max(self.slots, key=lambda s: self._reuse(s, tokens))
            if self._reuse(source, tokens) > keep and source is not slot:
                keep = self._reuse(source, tokens)
                lc.llama_memory_seq_rm(self.mem, slot.seq, -1, -1)
                lc.llama_memory_seq_cp(self.mem, source.seq, slot.seq, -1, -1)
            if not job.future.set_running_or_notify_cancel():
                continue
            grammar = None
            if job.grammar is not None:
                grammar = lc.llama_sampler_init_grammar(self.vocab, job.grammar.encode("utf-8"), b"root")
                if not grammar:
                    job.future.set_exception(CallFailed("llama.cpp could not parse the request's grammar"))
                    continue
            lc.llama_memory_seq_rm(self.mem, slot.seq, keep, -1)
            slot.cached, slot.reusable = tokens[:keep], keep
            slot.pending = tokens[keep:]
            slot.job, slot.out, slot.pieces, slot.multibyte_fix = job, [], [], 0
            slot.grammar = grammar

    def _step(self) -> None:
        """Admit what fits, then evaluate one prompt chunk of one slot, or decode one token of every slot."""
        self._admit()
        for s in self.slots:  # a caller that went away (a closed stream) frees its slot
            if s.job is not None and s.job.gone():
                if not s.job.future.done():
                    s.job.future.set_exception(CallFailed("llama.cpp: the caller went away"))
                self._release(s)
                s.job, s.pending = None, []
                self._lc.llama_memory_seq_rm(self.mem, s.seq, len(s.cached), -1)
        prompts = [s for s in self.slots if s.job is not None and not s.job.picked and s.pending]
        if prompts:
            self._prefill(prompts[0])
        elif any(s.job is not None for s in self.slots):
            self._decode()

    def _prefill(self, s: _Slot) -> None:
        """Evaluate the next chunk of ``s``'s prompt: the tokens up to the next multiple of PROMPT_CHUNK, alone in
        the batch, so a prompt is cut into the same chunks whatever its slot held before or runs beside it."""
        t0 = time.perf_counter()
        base = len(s.cached)
        take = min(len(s.pending), PROMPT_CHUNK - base % PROMPT_CHUNK)
        last = take == len(s.pending)
        batch = self.batch
        for j in range(take):
            batch.token[j] = s.pending[j]
            batch.pos[j] = base + j
            batch.n_seq_id[j] = 1
            batch.seq_id[j][0] = s.seq
            batch.logits[j] = 1 if last and j == take - 1 else 0
        batch.n_tokens = take
        self._decode_batch(take, 1, take)
        s.cached.extend(s.pending[:take])
        s.pending = s.pending[take:]
        if (base + take) % PROMPT_CHUNK == 0:  # a whole chunk: the cells another prompt may reuse
            s.reusable = base + take
        seconds = time.perf_counter() - t0
        self.prefill_steps += 1
        self.prefill_tokens += take
        self.prefill_s += seconds
        for k, v in enumerate((1, take, take * take, seconds, take * seconds)):
            self.prefill_fit[k] += v
        if last:
            self._pick(s, take - 1)

    def _decode(self) -> None:
        """Decode one token of every generating slot, with a padding row in every other slot: every step has the
        same ``size`` rows, each its slot's, every row's logits computed, so no row's kernels depend on how
        many others are generating."""
        lc = self._lc
        t0 = time.perf_counter()
        batch = self.batch
        real = []
        for s in self.slots:
            i = s.seq
            generating = s.job is not None and s.pending
            batch.token[i] = s.pending[0] if generating else self.bos
            batch.pos[i] = len(s.cached)
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = s.seq
            batch.logits[i] = 1
            if generating:
                real.append(s)
        batch.n_tokens = self.size
        self._decode_batch(self.size, len(real), len(real))
        for s in self.slots:
            if s in real:
                s.cached.append(s.pending[0])
                s.pending = []
            else:  # the padding row's cell goes again
                lc.llama_memory_seq_rm(self.mem, s.seq, len(s.cached), -1)
        self.decode_steps += 1
        self.decode_tokens += len(real)
        self.decode_s += time.perf_counter() - t0
        for s in real:
            self._pick(s, s.seq)

    def _decode_batch(self, n: int, sequences: int, evaluated: int) -> None:
        rc = self._lc.llama_decode(self.ctx, self.batch)
        self.steps += 1
        self.evaluated += evaluated
        self.peak = max(self.peak, sequences)
        if rc != 0:
            raise CallFailed(f"llama.cpp: llama_decode returned {rc} for a batch of {n} tokens "
                             f"({sequences} sequences of {self.n_ctx_seq} cells)")

    def _pick(self, s: _Slot, row: int) -> None:
        logits = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,))
        how = s.job.sampling if s.job is not None else None
        if s.grammar is None:
            token = int(np.argmax(logits)) if how is None else how.pick(logits)
        else:
            try:
                token = self._grammar_pick(s.grammar, logits, how)
            except CallFailed as err:  # this request's alone: the others decode on
                job = s.job
                self._release(s)
                s.job, s.pending = None, []
                if job is not None and not job.future.done():
                    job.future.set_exception(err)
                return
            if not self._lc.llama_vocab_is_eog(self.vocab, token):  # the end needs no accepting (nothing follows)
                self._lc.llama_sampler_accept(s.grammar, token)
        self._accept(s, token)

    def _grammar_pick(self, grammar: Any, logits: np.ndarray, how: Sampling | None) -> int:
        """Return the token picked from ``logits`` among those ``grammar`` allows next."""
        if how is None:
            best = int(np.argmax(logits))
            if self._allows(grammar, best, float(logits[best])):
                return best  # the best token is allowed: masking the others changes nothing
        masked = self._mask(grammar, logits)
        if not np.isfinite(masked.max()):
            raise CallFailed("llama.cpp: the request's grammar allows no next token")
        return int(np.argmax(masked)) if how is None else how.pick(masked)

    def _apply(self, grammar: Any, candidates: np.ndarray) -> None:
        lc = self._lc
        cur = lc.llama_token_data_array(data=candidates.ctypes.data_as(lc.llama_token_data_p),
                                        size=candidates.size, selected=-1, sorted=False)
        lc.llama_sampler_apply(grammar, ctypes.byref(cur))
        if cur.size != candidates.size:  # the grammar sampler only sets logits; it never drops candidates
            raise CallFailed("llama.cpp: a grammar changed the candidates' count")

    def _allows(self, grammar: Any, token: int, logit: float) -> bool:
        one = self._one
        one["id"], one["logit"], one["p"] = token, logit, 0.0
        self._apply(grammar, one)
        return bool(np.isfinite(one["logit"][0]))

    def _mask(self, grammar: Any, logits: np.ndarray) -> np.ndarray:
        """Return ``logits`` with every token ``grammar`` refuses next at minus infinity."""
        c = self._candidates
        c["id"] = np.arange(self.n_vocab, dtype=np.int32)
        c["logit"], c["p"] = logits, 0.0
        self._apply(grammar, c)
        masked = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        masked[c["id"]] = c["logit"]
        return masked

    def _release(self, s: _Slot) -> None:
        """Free the slot's grammar sampler, if any."""
        if s.grammar is not None:
            self._lc.llama_sampler_free(s.grammar)
            s.grammar = None

    def _accept(self, s: _Slot, token: int) -> None:
        """Add ``token`` to the slot's output, or finish it: ``Llama._create_completion``'s rules."""
        job = s.job
        assert job is not None
        job.picked.append(token)
        if self._lc.llama_vocab_is_eog(self.vocab, token):
            self._finish(s, self._text(s), "stop")
            return
        s.out.append(token)
        piece = self.llm._model.detokenize([token])
        s.pieces.append(piece)
        all_text = self._text(s)
        # An unfinished UTF-8 character: no stop or length check until it is whole (as the library does).
        for k, char in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    s.multibyte_fix = num - k
        if s.multibyte_fix > 0:
            s.multibyte_fix -= 1
            s.pending = [token]
            return
        hits = [stop for stop in job.stops if stop in all_text]
        if hits:
            self._finish(s, all_text[: all_text.index(hits[0])], "stop")
            return
        if len(s.out) >= job.max_tokens:
            self._finish(s, all_text, "length")
            return
        if job.on_text is not None:
            job.on_text(all_text)
        s.pending = [token]

    def _text(self, s: _Slot) -> bytes:
        text = b"".join(s.pieces)
        # Llama's detokenize drops the space after a leading BOS (an empty prompt's completion starts with one).
        return text[1:] if s.out and s.out[0] == self.bos and text[:1] == b" " else text

    def _finish(self, s: _Slot, text: bytes, reason: str) -> None:
        job = s.job
        assert job is not None
        self._release(s)
        s.job, s.pending = None, []
        if not job.future.done():
            answer, dropped = decode_answer(text)
            if dropped:
                self.undecodable += dropped
                warnings.warn(f"llama.cpp ({self.llm.model_path}): {dropped} byte(s) of an answer were not UTF-8 and "
                              f"are left out of its text (the model stopped inside a character)", UserWarning,
                              stacklevel=2)
            job.future.set_result(Completion(
                text=answer, tokens_in=len(job.tokens), tokens_out=len(s.out),
                latency_s=time.perf_counter() - job.start, finish_reason=reason,
            ))


def decode_answer(raw: bytes) -> tuple[str, int]:
    """Return the text of an answer's bytes and how many bytes were left out of it for not being UTF-8.

    Decoded as ``Llama.create_completion`` decodes (``errors="ignore"``), so that a batched answer is the
    library's to the character; what that drops is counted instead of vanishing.
    """
    text = raw.decode("utf-8", errors="ignore")
    return text, len(raw) - len(text.encode("utf-8"))


def n_ctx_error(n_tokens: int, n_ctx: int) -> ValueError:
    """Return the error ``Llama.create_completion`` raises for a prompt that does not fit (same words)."""
    return ValueError(f"Requested tokens ({n_tokens}) exceed context window of {n_ctx}")


