"""In-process vLLM: offline batch generation with ``vllm.LLM`` on a GPU.

``engine: vllm`` loads ``model`` (a Hugging Face folder or hub id) once per process with
``vllm.LLM(model, seed, max_model_len=n_ctx, dtype, **engine_args)`` and answers requests in
batches: ``complete`` queues a request, one drain task hands everything queued to a single
``LLM.chat`` (chat mode: the model's chat template, or ``chat_template``) or ``LLM.generate``
(completion mode: the ``prompt_format`` text; raw prompts) call in a worker thread, each
request with its own ``SamplingParams`` (a judge's JSON schema becomes
``StructuredOutputsParams(json=...)``, vLLM's guided decoding). vLLM schedules the batch itself
(continuous batching, paged KV cache), so there is no batch-size knob here.

vLLM is imported only when a model names this engine; without it, or without a CUDA GPU, the
engine says so and how to proceed. The other set-up, a vLLM server (``vllm serve MODEL``)
called by the ``openai`` engine with ``base_url: http://HOST:8000/v1``, needs nothing here.

The translation from our requests to vLLM's arguments (``sampling_kwargs``, ``split_batch``) and
back (``completion_of``) is plain Python, tested without a GPU.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..config import ModelSpec
from ..errors import EngineError
from .base import BatchedEngine, Completion, Request, completion_stops, render_completion_prompt
from .control_tokens import neutralise_messages
from .identity import content_identity
from .model_cache import ModelCache

_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm")
_MODELS: ModelCache[tuple[Any, ...], Any] = ModelCache()  # (model, n_ctx, dtype, seed, engine_args) -> its vllm.LLM

NO_VLLM = ("engine 'vllm' needs vLLM, which is not installed: pip install 'arena-learning[vllm]' (or pip install vllm; "
           "Linux with a CUDA GPU). Without a "
           "GPU here, serve the model elsewhere (`vllm serve MODEL`) and use engine: openai with base_url: "
           "http://HOST:8000/v1")


def require_vllm() -> Any:
    """Return the ``vllm`` module, or raise an EngineError that says how to get it or do without."""
    try:
        import vllm
    except ImportError as err:
        raise EngineError(NO_VLLM) from err
    return vllm


def require_gpu(name: str) -> None:
    """Raise an EngineError when torch sees no CUDA device (vLLM's offline engine needs one)."""
    import torch

    if not torch.cuda.is_available():
        raise EngineError(
            f"model {name!r}: engine 'vllm' needs a CUDA GPU and torch sees none on this machine "
            f"(torch {torch.__version__}, cuda available: False). Run it on a GPU machine, or serve the model "
            f"there with `vllm serve MODEL` and use engine: openai with base_url: http://HOST:8000/v1"
        )


def load_llm(spec: ModelSpec) -> Any:
    """Return the shared ``vllm.LLM`` of ``spec`` (one per model, context size, dtype and engine_args)."""
    vllm = require_vllm()
    require_gpu(spec.name)

    def load() -> Any:
        kwargs = {"model": spec.model, "seed": spec.params.seed, "max_model_len": spec.n_ctx,
                  "dtype": "float32" if spec.dtype == "float32" else spec.dtype, **spec.engine_args}
        try:
            return vllm.LLM(**kwargs)
        except (OSError, ValueError, RuntimeError) as err:
            raise EngineError(f"model {spec.name!r}: vLLM could not load {spec.model}: {err}") from err

    key = (spec.model, spec.n_ctx, spec.dtype, spec.params.seed, repr(sorted(spec.engine_args.items())))
    return _MODELS.get(key, load)


def sampling_kwargs(params: dict[str, Any], stop: list[str]) -> dict[str, Any]:
    """Return the keyword arguments of ``vllm.SamplingParams`` for one request's params.

    ``json_schema`` (a judge's verdict schema) becomes ``structured_outputs`` (a dict here,
    ``StructuredOutputsParams(json=schema)`` when built), vLLM's guided JSON decoding.
    """
    kwargs: dict[str, Any] = {
        "max_tokens": int(params["max_tokens"]),
        "temperature": float(params["temperature"]),
        "top_p": float(params["top_p"]),
        "seed": int(params["seed"]),
        "stop": list(stop) or None,
    }
    if params.get("json_schema") is not None:
        kwargs["structured_outputs"] = {"json": params["json_schema"]}
    return kwargs


def build_sampling_params(vllm: Any, kwargs: dict[str, Any]) -> Any:
    """Return ``vllm.SamplingParams(**kwargs)`` with the structured-output dict made vLLM's object."""
    kwargs = dict(kwargs)
    structured = kwargs.pop("structured_outputs", None)
    if structured is not None:
        from vllm.sampling_params import StructuredOutputsParams

        kwargs["structured_outputs"] = StructuredOutputsParams(**structured)
    return vllm.SamplingParams(**kwargs)


def completion_of(output: Any, latency_s: float) -> Completion:
    """Return the Completion of one ``vllm.RequestOutput``."""
    first = output.outputs[0]
    return Completion(
        text=first.text,
        tokens_in=len(output.prompt_token_ids or []),
        tokens_out=len(first.token_ids),
        latency_s=latency_s,
        finish_reason=first.finish_reason,
    )


class VLLMEngine(BatchedEngine):
    kind = "vllm"
    in_process = True
    worker = _WORKER

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.llm = load_llm(spec)
        self._model_id: str | None = None

    @property
    def model_id(self) -> str:
        # A local folder is its content (a retrained folder is a new model); a hub id is its name and revision.
        if self._model_id is None:
            path = Path(self.spec.model).expanduser()
            if path.exists():
                self._model_id = f"{path.name}@{content_identity(path)[:23]}"
            else:
                self._model_id = super().model_id
        return self._model_id

    @property
    def concurrency(self) -> int:
        return max(self.spec.batch_size, 64)  # vLLM schedules what it is given; keep it fed

    def key_params(self, request: Request) -> dict[str, Any]:
        params = super().key_params(request)
        params["dtype"] = self.spec.dtype
        return params

    def split_batch(self, requests: list[Request]) -> tuple[list[int], list[int]]:
        """Return (indices answered through the chat template, indices answered as plain text prompts)."""
        chat = [i for i, r in enumerate(requests) if r.messages is not None and self.spec.mode == "chat"]
        return chat, [i for i in range(len(requests)) if i not in set(chat)]

    def text_prompt(self, request: Request) -> tuple[str, list[str]]:
        """Return (text to continue, stop strings) of a completion-mode or raw-prompt request."""
        params = {**self.default_params(), **request.params}
        if request.messages is None:
            return request.prompt or "", list(params["stop"])
        fmt = self.spec.prompt_format
        return render_completion_prompt(fmt, request.messages), completion_stops(fmt, params["stop"])

    def generate_batch(self, requests: list[Request]) -> list[Completion | BaseException]:
        """Answer ``requests`` with at most two vLLM calls (chat and text); run in the worker thread."""
        vllm = require_vllm()
        out: list[Completion | BaseException | None] = [None] * len(requests)
        chat, text = self.split_batch(requests)
        start = time.perf_counter()
        if chat:
            convs = [neutralise_messages(requests[i].messages or []) for i in chat]
            sps = [build_sampling_params(vllm, sampling_kwargs(p, p["stop"]))
                   for p in ({**self.default_params(), **requests[i].params} for i in chat)]
            results = self.llm.chat(convs, sampling_params=sps, use_tqdm=False, chat_template=self.spec.chat_template,
                                    add_generation_prompt=True)
            for i, res in zip(chat, results):
                out[i] = completion_of(res, time.perf_counter() - start)
        if text:
            prompts, sps = [], []
            for i in text:
                prompt, stop = self.text_prompt(requests[i])
                prompts.append(prompt)
                sps.append(build_sampling_params(vllm, sampling_kwargs({**self.default_params(), **requests[i].params},
                                                                       stop)))
            results = self.llm.generate(prompts, sampling_params=sps, use_tqdm=False)
            for i, res in zip(text, results):
                comp = completion_of(res, time.perf_counter() - start)
                if requests[i].messages is not None and self.spec.prompt_format.strip_answer:
                    comp.text = comp.text.strip()
                out[i] = comp
        return out  # type: ignore[return-value]  # no None left: every request is a chat or a text one
