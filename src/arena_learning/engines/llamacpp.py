"""In-process llama.cpp through llama-cpp-python.

One ``Llama`` per (file, context size, threads, chat format) is shared by every
ModelSpec that names it, so three prompt formats of the bundled model load it
once. Greedy requests and seeded samples, in completion or chat mode, with or without a
JSON schema, are decoded ``parallel`` at a time in one context (``llama_batcher``:
continuous batching, shared prefixes evaluated once, every answer a function of its
request alone; a sample draws with the batcher's own seeded sampler, a schema masks
with llama.cpp's grammar sampler); unseeded samples and everything with ``parallel: 1``
run one at a time through the ``Llama``. A chat request is decoded from exactly what
``Llama.create_chat_completion`` would decode: its own chat handler renders the
template, tokenises it and picks the grammar (``chat_completion_args``).
Every llama.cpp call runs on one worker thread; the event loop stays free for the
ledger and progress bars.

The one-at-a-time path reuses the longest prefix the ``Llama`` holds from its previous
prompt, cut back to a multiple of PROMPT_CHUNK, and evaluates the rest in chunks that
end at multiples of it: a prompt's numbers do not depend on the prompt before it (a run
killed and resumed has other predecessors).
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..config import ModelSpec
from ..errors import EngineError
from .base import (
    CallFailed,
    Completion,
    Engine,
    Request,
    RequestTooLarge,
    available_cores,
    completion_stops,
    render_completion_prompt,
)
from .bundled import resolve_model_path
from .control_tokens import neutralise_messages
from .identity import content_identity
from .llama_batcher import DECODING, PROMPT_CHUNK, Batcher, Job, Sampling, n_ctx_error, prompt_salt
from .llama_check import check_llama
from .model_cache import ModelCache
from .streaming import TextStream

# the model's key -> (its Llama, the lock of its use); (the model's key, batch size) -> its batched context
_MODELS: ModelCache[tuple[Any, ...], tuple[Any, threading.Lock]] = ModelCache()
_BATCHERS: ModelCache[tuple[Any, ...], Batcher] = ModelCache(_MODELS.lock)
# Every llama.cpp call runs on this one thread. ggml's OpenMP keeps a thread team per calling
# thread; calls from a pool's changing threads leave idle teams spinning on the cores the
# working team needs (measured: 20% slower on 2 cores).
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp")


@atexit.register
def _close_models() -> None:
    # Free models before interpreter shutdown tears down llama_cpp's globals,
    # which otherwise makes Llama.__del__ print a TypeError at exit.
    with _MODELS.lock:
        for batcher in _BATCHERS.drop():  # a context goes before its model
            batcher.close()
        for llm, _ in _MODELS.drop():
            llm.close()


def _model_key(spec: ModelSpec) -> tuple[Any, ...]:
    path = resolve_model_path(spec.model)
    return (str(path), spec.n_ctx, spec.n_threads or available_cores(), spec.chat_format, spec.chat_template)


def is_loaded(spec: ModelSpec) -> bool:
    """Return whether ``spec``'s model is loaded in this process already (an engine of it starts at once)."""
    return _MODELS.is_loaded(_model_key(spec))


def load_llama(spec: ModelSpec) -> tuple[Any, threading.Lock]:
    """Return the shared ``Llama`` for ``spec`` and the lock that serialises its use."""
    path = resolve_model_path(spec.model)
    n_threads = spec.n_threads or available_cores()

    def load() -> tuple[Any, threading.Lock]:
        # A library built for another CPU would kill this process at its first token: probe it in a child first.
        check_llama()
        try:
            from llama_cpp import Llama
        except ImportError as err:  # pragma: no cover - it is a dependency
            raise EngineError("engine 'llamacpp' needs the 'local' extra (llama-cpp-python): "
                              "pip install 'arena-learning[local]'") from err
        kwargs: dict[str, Any] = {
            "model_path": str(path),
            "n_ctx": spec.n_ctx,
            "n_threads": n_threads,
            "verbose": False,
        }
        if spec.chat_format and not spec.chat_template:
            kwargs["chat_format"] = spec.chat_format
        try:
            llm = Llama(**kwargs)
        except (ValueError, RuntimeError) as err:
            raise EngineError(f"model {spec.name!r}: llama.cpp could not load {path}: {err}") from err
        if spec.chat_template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            # Templates write {{ bos_token }} themselves (as Hugging Face ones do); give them this
            # model's own special tokens, and stop at its end-of-sequence token.
            def text(token: int) -> str:
                return llm.detokenize([token], special=True).decode("utf-8", "replace")

            llm.chat_handler = Jinja2ChatFormatter(
                template=spec.chat_template, eos_token=text(llm.token_eos()), bos_token=text(llm.token_bos())
            ).to_chat_handler()
        _align_prefix_reuse(llm)
        return llm, threading.Lock()

    return _MODELS.get(_model_key(spec), load)


def _align_prefix_reuse(llm: Any) -> None:
    """Make ``llm`` evaluate every prompt in chunks ending at multiples of PROMPT_CHUNK, reusing only whole chunks.

    ``Llama.generate`` reuses the longest prefix shared with the previous prompt and evaluates the rest in
    ``n_batch`` chunks from there, so a prompt's cells (and answer) depended on its predecessor. Cutting the
    reuse back to a chunk boundary makes the evaluation the one a fresh ``Llama`` does.
    """
    generate = llm.generate
    llm.n_batch = min(llm.n_batch, PROMPT_CHUNK)

    def aligned_generate(tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("reset", True) and llm.n_tokens > 0:
            tokens = list(tokens)
            held = [int(t) for t in llm._input_ids]
            n = 0
            while n < min(len(held), len(tokens) - 1) and held[n] == tokens[n]:
                n += 1
            llm.n_tokens = min(llm.n_tokens, n - n % PROMPT_CHUNK)
        return generate(tokens, *args, **kwargs)

    llm.generate = aligned_generate


def load_batcher(spec: ModelSpec) -> Batcher:
    """Return the batched context that decodes ``spec``'s greedy requests, ``spec.parallel`` at a time."""
    llm, _ = load_llama(spec)
    return _BATCHERS.get((*_model_key(spec), spec.parallel),
                         lambda: Batcher(llm, spec.parallel, int(llm.n_ctx()), _WORKER))


class LlamaCppEngine(Engine):
    kind = "llamacpp"
    in_process = True

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.llm, self.lock = load_llama(spec)
        self._model_id: str | None = None
        self._announced = 0  # requests announced to the batcher (``expect``) not submitted yet

    @property
    def in_flight(self) -> int:
        # Enough queued that a slot that finishes takes the next request at once. (With parallel 1,
        # one at a time: bookkeeping done on the side while llama.cpp computes slows it more than it
        # saves, measured 20% on 2 cores.)
        return 2 * self.spec.parallel if self.spec.parallel > 1 else 1

    @property
    def model_id(self) -> str:
        # The file's name (for people) and a hash of its bytes: another file under the same name, or
        # a file rebuilt in place, is another model; a moved file keeps its calls.
        if self._model_id is None:
            path = resolve_model_path(self.spec.model)
            self._model_id = f"{path.name}@{content_identity(path)[:23]}"
        return self._model_id

    def prompt_tokens(self, prompt: str) -> list[int]:
        """Return ``prompt`` tokenised as plain text: a control-token string in it stays text; the BOS token
        (added as the library adds it to a string prompt) is the only special token."""
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)

    def batched(self, request: Request) -> bool:
        """Whether ``request`` is decoded in the batched context: greedy or a seeded sample (drawn by the batcher's
        own sampler, whose generator only the request's seed moves), in completion or chat mode, with or without a
        JSON schema. ``parallel: 1`` opts out: every request one at a time through the ``Llama``.
        """
        params = {**self.default_params(), **request.params}
        return self.spec.parallel > 1 and (float(params["temperature"]) == 0.0 or params.get("seed") is not None)

    def key_params(self, request: Request) -> dict[str, Any]:
        # A batched answer comes from other kernels than the one-at-a-time one (and a batched sample from another
        # sampler): its calls are keyed with their decoding and row count, so the ledger never hands one-at-a-time
        # answers for batched ones (nor a batch of 8's for a batch of 16's). One-at-a-time keys are what they were.
        params = super().key_params(request)
        if self.batched(request):
            params["decoding"] = f"{DECODING}x{self.spec.parallel}"
        return params

    def expect(self, requests: Sequence[Request]) -> None:
        n = sum(1 for r in requests if self.batched(r))
        if n:
            load_batcher(self.spec).expect(n)
            self._announced += n

    def expect_done(self) -> None:
        if self._announced:
            load_batcher(self.spec).withdraw(self._announced)
            self._announced = 0

    def _announced_job(self, request: Request) -> Job:
        """Return the batched job of ``request``, one of the announced ones while any are left."""
        announced = self._announced > 0
        if announced:
            self._announced -= 1
        try:
            job = self._job(request)
        except BaseException:
            if announced:  # it will never reach the queue: the batcher must not wait for it
                load_batcher(self.spec).withdraw(1)
            raise
        job.announced = announced
        return job

    async def complete(self, request: Request) -> Completion:
        if not self.batched(request):
            return await asyncio.get_running_loop().run_in_executor(_WORKER, self.complete_sync, request)
        job = self._announced_job(request)
        try:
            out = await asyncio.wrap_future(load_batcher(self.spec).submit(job))
        except asyncio.CancelledError:
            job.abandoned = True  # a running decode cannot be cancelled through its future
            raise
        return self._finish(request, out)

    async def stream(self, request: Request) -> AsyncGenerator[str | Completion, None]:
        if not self.batched(request):
            async for part in super().stream(request):
                yield part
            return
        loop = asyncio.get_running_loop()
        texts: asyncio.Queue[bytes] = asyncio.Queue()
        job = self._job(request)

        def on_text(text: bytes) -> None:  # on the worker thread
            loop.call_soon_threadsafe(texts.put_nowait, text)

        job.on_text = on_text
        future = asyncio.wrap_future(load_batcher(self.spec).submit(job))
        shown = TextStream(job.stops, self._strips(request))
        try:
            while not future.done():
                getter = asyncio.ensure_future(texts.get())
                await asyncio.wait({getter, future}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    break
                delta = shown.feed(getter.result())
                if delta:
                    yield delta
            out = self._finish(request, await future)
        finally:
            job.abandoned = True  # a client that went away frees its slot (a no-op once finished)
            future.add_done_callback(lambda f: f.cancelled() or f.exception())  # nobody waits for it now
        rest = shown.rest(out.text)
        if rest:
            yield rest
        yield out

    def batch_stats(self) -> dict[str, int]:
        """Return the batched context's counters: decode steps, tokens decoded, most sequences in one step, and
        the steps that only decode (each sequence one generated token) apart from those evaluating prompt tokens,
        with their tokens and milliseconds (the decode-only rate: decode_tokens / decode_ms), and the bytes of
        answers left out of their text for not being UTF-8 (undecodable; each warned)."""
        key = (*_model_key(self.spec), self.spec.parallel)
        b = _BATCHERS.peek(key)
        counts = ("steps", "evaluated", "peak", "decode_steps", "decode_tokens", "prefill_steps", "prefill_tokens",
                  "undecodable")
        if b is None:
            return {"size": self.spec.parallel, **dict.fromkeys(counts, 0), "decode_ms": 0, "prefill_ms": 0}
        return {"size": b.size, **{c: getattr(b, c) for c in counts}, "decode_ms": round(b.decode_s * 1000),
                "prefill_ms": round(b.prefill_s * 1000)}

    def _strips(self, request: Request) -> bool:
        return request.messages is not None and self.spec.prompt_format.strip_answer

    def _prompt(self, request: Request, params: dict[str, Any]) -> tuple[str, list[str]]:
        """Return the text the model continues and the stop strings of a completion-mode request."""
        stop = params["stop"]
        if request.messages is None:
            return request.prompt or "", stop
        fmt = self.spec.prompt_format
        return render_completion_prompt(fmt, request.messages), completion_stops(fmt, stop)

    def _job(self, request: Request) -> Job:
        params = {**self.default_params(), **request.params}
        schema = params.get("json_schema")
        if request.messages is not None and self.spec.mode == "chat":
            args = chat_completion_args(self.llm, request.messages, params)
            tokens, stop = list(args["prompt"]), args.get("stop") or []
            grammar = args.get("grammar")
            gbnf = grammar._grammar if grammar is not None else None
        else:
            prompt, stop = self._prompt(request, params)
            tokens = self.prompt_tokens(prompt)
            gbnf = _grammar(schema)._grammar if schema is not None else None
        # The configured window (llama.cpp rounds its own up to a multiple of 256; the Llama keeps n_ctx tokens).
        n_ctx = min(self.spec.n_ctx, int(self.llm.n_ctx()))
        if len(tokens) >= n_ctx:
            err = n_ctx_error(len(tokens), n_ctx)
            raise RequestTooLarge(f"llama.cpp: {err} (raise n_ctx of model {self.spec.name!r})")
        max_tokens = params["max_tokens"]
        # create_completion's rule: no limit (or one past the window) means up to the window's end.
        if max_tokens is None or max_tokens <= 0 or max_tokens + len(tokens) >= n_ctx:
            max_tokens = n_ctx - len(tokens)
        temperature = float(params["temperature"])
        sampling = (Sampling(temperature=temperature, seed=int(params["seed"]), top_p=float(params["top_p"]),
                             salt=prompt_salt(tokens)) if temperature > 0.0 else None)
        return Job(tokens=tokens, max_tokens=max_tokens, stops=[s.encode("utf-8") for s in stop or []],
                   sampling=sampling, grammar=gbnf)

    def _finish(self, request: Request, out: Completion) -> Completion:
        if self._strips(request):
            out.text = out.text.strip()
        return out

    def complete_sync(self, request: Request) -> Completion:
        """Return the completion of ``request``, run in the calling thread (prefer ``complete``)."""
        params = {**self.default_params(), **request.params}
        schema = params.get("json_schema")
        kwargs = {
            "max_tokens": params["max_tokens"],
            "temperature": params["temperature"],
            "top_p": params["top_p"],
            "seed": params["seed"],
        }
        start = time.perf_counter()
        try:
            with self.lock:
                if params["temperature"] > 0:
                    # A seeded sample must repeat whatever this Llama evaluated before. Reusing a cached
                    # prompt prefix re-evaluates only the rest (or the last token alone), and logits from a
                    # batch of one differ from a full batch in the last bits; at temperature > 0 a draw near
                    # a boundary then picks another token. Start from an empty cache: the whole prompt is
                    # evaluated the same way every time. Greedy calls keep the prefix cache (faster).
                    self.llm.reset()
                if request.messages is not None and self.spec.mode == "chat":
                    fmt = {"type": "json_object", "schema": schema} if schema is not None else None
                    # The template writes real control tokens; the messages' text must not (control_tokens.py).
                    out = self.llm.create_chat_completion(
                        messages=neutralise_messages(request.messages), stop=params["stop"] or None,
                        response_format=fmt, **kwargs
                    )
                    text = out["choices"][0]["message"]["content"] or ""
                else:
                    prompt, stop = self._prompt(request, params)
                    grammar = _grammar(schema) if schema is not None else None
                    out = self.llm.create_completion(prompt=self.prompt_tokens(prompt), stop=stop or None,
                                                     grammar=grammar, **kwargs)
                    text = out["choices"][0]["text"]
                    if self._strips(request):
                        text = text.strip()
        except ValueError as err:
            # llama.cpp raises ValueError for a prompt longer than the context window.
            raise RequestTooLarge(f"llama.cpp: {err} (raise n_ctx of model {self.spec.name!r})") from err
        except RuntimeError as err:
            raise CallFailed(f"llama.cpp: {err}") from err
        usage = out.get("usage", {})
        return Completion(
            text=text,
            tokens_in=usage.get("prompt_tokens", 0),
            tokens_out=usage.get("completion_tokens", 0),
            latency_s=time.perf_counter() - start,
            finish_reason=out["choices"][0].get("finish_reason"),
        )


class _Recorded(Exception):  # a result carried out of the chat handler, not an error
    def __init__(self, kwargs: dict[str, Any]):
        super().__init__("recorded")
        self.kwargs = kwargs


class _Recorder:
    """Stands in for a ``Llama`` inside its chat handler: everything is the Llama's, except that
    ``create_completion`` records its arguments (the tokens, stops and grammar it was given) instead of decoding."""

    def __init__(self, llm: Any):
        self._llm = llm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, **kwargs: Any) -> Any:
        raise _Recorded(kwargs)


def chat_completion_args(llm: Any, messages: list[dict[str, str]], params: dict[str, Any]) -> dict[str, Any]:
    """Return what ``llm.create_chat_completion`` would hand ``create_completion`` for ``messages``: ``prompt``
    (the rendered template's tokens), ``stop`` (the caller's and the format's) and ``grammar`` (a JSON schema's,
    or None).

    The library's own handler runs (whichever the Llama picks: a Jinja template, a named format, the GGUF's
    template), so the batched path decodes the very tokens the one-at-a-time path does; only the decoding differs.
    """
    from llama_cpp import Llama

    schema = params.get("json_schema")
    fmt = {"type": "json_object", "schema": schema} if schema is not None else None
    create: Any = Llama.create_chat_completion  # called unbound, on the stand-in
    try:
        create(
            _Recorder(llm),
            messages=neutralise_messages(messages), stop=params["stop"] or None, response_format=fmt,
            max_tokens=params["max_tokens"], temperature=params["temperature"], top_p=params["top_p"],
            seed=params["seed"],
        )
    except _Recorded as rec:
        return rec.kwargs
    raise EngineError("llama.cpp's chat handler returned without decoding: this chat format cannot be batched "
                      "(set parallel: 1)")


_GRAMMARS: dict[str, Any] = {}


def _grammar(schema: dict[str, Any]) -> Any:
    """Return the llama.cpp grammar that constrains output to ``schema`` (built once per schema)."""
    import json

    from llama_cpp import LlamaGrammar

    key = json.dumps(schema, sort_keys=True)
    if key not in _GRAMMARS:
        _GRAMMARS[key] = LlamaGrammar.from_json_schema(key, verbose=False)
    return _GRAMMARS[key]
