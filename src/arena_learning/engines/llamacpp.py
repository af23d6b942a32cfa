"""In-process llama.cpp through llama-cpp-python.

One ``Llama`` per (file, context size, threads, chat format) is shared by every
ModelSpec that names it, so three prompt formats of the bundled model load it
once. llama.cpp is not thread-safe and already uses every core for one
request, so requests run one at a time in a worker thread; the event loop stays
free for the ledger and progress bars.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..config import ModelSpec
from ..errors import EngineError
from .base import CallFailed, Completion, RequestTooLarge, Engine, Request, completion_stops, render_completion_prompt
from .bundled import resolve_model_path
from .identity import content_identity
from .control_tokens import neutralise_messages
from .llama_check import check_llama

_MODELS: dict[tuple[Any, ...], tuple[Any, threading.Lock]] = {}
# Every llama.cpp call runs on this one thread. ggml's OpenMP keeps a thread team per calling
# thread; calls from a pool's changing threads leave idle teams spinning on the cores the
# working team needs (measured: 20% slower on 2 cores).
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp")
_MODELS_LOCK = threading.Lock()


@atexit.register
def _close_models() -> None:
    # Free models before interpreter shutdown tears down llama_cpp's globals,
    # which otherwise makes Llama.__del__ print a TypeError at exit.
    with _MODELS_LOCK:
        for llm, _ in _MODELS.values():
            llm.close()
        _MODELS.clear()


def load_llama(spec: ModelSpec) -> tuple[Any, threading.Lock]:
    """Return the shared ``Llama`` for ``spec`` and the lock that serialises its use."""
    path = resolve_model_path(spec.model)
    n_threads = spec.n_threads or os.cpu_count() or 1
    key = (str(path), spec.n_ctx, n_threads, spec.chat_format, spec.chat_template)
    with _MODELS_LOCK:
        if key not in _MODELS:
            # A library built for another CPU would kill this process at its first token: probe it in a child first.
            check_llama()
            try:
                from llama_cpp import Llama
            except ImportError as err:  # pragma: no cover - it is a dependency
                raise EngineError("engine 'llamacpp' needs llama-cpp-python: pip install llama-cpp-python") from err
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
            _MODELS[key] = (llm, threading.Lock())
        return _MODELS[key]


class LlamaCppEngine(Engine):
    kind = "llamacpp"
    in_process = True

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.llm, self.lock = load_llama(spec)
        self._model_id: str | None = None

    @property
    def in_flight(self) -> int:
        # One at a time: llama.cpp's threads already use every core, and bookkeeping done on the
        # side while it computes slows it more than it saves (measured: 20% on 2 cores).
        return 1

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

    async def complete(self, request: Request) -> Completion:
        return await asyncio.get_running_loop().run_in_executor(_WORKER, self.complete_sync, request)

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
                    stop = params["stop"]
                    if request.messages is not None:
                        fmt = self.spec.prompt_format
                        prompt = render_completion_prompt(fmt, request.messages)
                        stop = completion_stops(fmt, stop)
                    else:
                        prompt = request.prompt or ""
                    grammar = _grammar(schema) if schema is not None else None
                    out = self.llm.create_completion(prompt=self.prompt_tokens(prompt), stop=stop or None,
                                                     grammar=grammar, **kwargs)
                    text = out["choices"][0]["text"]
                    if request.messages is not None and self.spec.prompt_format.strip_answer:
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


_GRAMMARS: dict[str, Any] = {}


def _grammar(schema: dict[str, Any]) -> Any:
    """Return the llama.cpp grammar that constrains output to ``schema`` (built once per schema)."""
    import json

    from llama_cpp import LlamaGrammar

    key = json.dumps(schema, sort_keys=True)
    if key not in _GRAMMARS:
        _GRAMMARS[key] = LlamaGrammar.from_json_schema(key, verbose=False)
    return _GRAMMARS[key]
