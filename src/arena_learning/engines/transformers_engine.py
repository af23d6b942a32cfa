"""In-process Hugging Face transformers: any model folder, trained or not, batched generation.

This is the engine the flywheel's trained models answer through (the same folder serves with
vLLM at scale). ``model`` is a Hugging Face model folder, a GGUF file, or ``bundled`` (the
bundled Gemma 3 270M GGUF). A GGUF is dequantized into a plain safetensors folder once per
machine and cached beside the assembled GGUF (``bundled.cache_dir()``): loading a GGUF through
``gguf_file=`` takes about a minute on 2 cores, the cached folder loads in a few seconds.

The ledger's identity of the model is its content (a hash of the folder's weight, config and
tokenizer files, ``identity.content_identity``): a model retrained into the same folder is a new
model and never gets the old model's answers.

Requests are batched: ``complete`` queues a request; one drain task on the event loop takes up to
``spec.batch_size`` queued requests with the same sampling params and runs them as one left-padded
``generate`` in a worker thread. ``in_flight`` is twice the batch size, so the next batch is queued
while one computes. Greedy and sampled requests batch alike: a sampled row draws its tokens from its
own generator, seeded by its request's seed and its prompt (``RowSampler``), so its draws do not
depend on the rows beside it (only the last bits of its logits can: a draw within rounding of a
boundary may differ once in a long while, as for greedy batches).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..config import ModelSpec
from ..errors import ArenaError, EngineError
from .base import (
    BatchedEngine,
    CallFailed,
    Completion,
    Request,
    RequestTooLarge,
    completion_stops,
    render_completion_prompt,
)
from .bundled import BUNDLED_NAME, bundled_model_path, cache_dir
from .control_tokens import neutralise_messages
from .identity import content_identity
from .model_cache import ModelCache
from .model_names import locate
from .registry import lookup, model_path

BUNDLED_HF_NAME = "gemma3-270m-hf"
"""The bundled GGUF dequantized into a Hugging Face folder, beside the assembled GGUF."""
SOURCE_MARK = ".arena-source"  # hidden: not part of the folder's content identity

_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transformers")
# (folder, its content identity, dtype) -> (model, tokenizer)
_MODELS: ModelCache[tuple[str, str, str], tuple[Any, Any]] = ModelCache()


# ---- GGUF -> safetensors, once -------------------------------------------------------


def clear_quantization(model: Any) -> Any:
    """Make a model loaded from a GGUF (dequantized) look like a plain one.

    ``from_pretrained(gguf_file=...)`` dequantizes the weights but leaves the GGUF quantizer on the
    model; Trainer then refuses it as "quantized" and ``save_pretrained`` writes a
    quantization_config. Clearing ``hf_quantizer``, ``is_quantized`` and
    ``config.quantization_config`` makes it an ordinary float model.
    """
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    with contextlib.suppress(AttributeError):
        model.is_quantized = False
    cfg = getattr(model, "config", None)
    if cfg is not None and getattr(cfg, "quantization_config", None) is not None:
        with contextlib.suppress(AttributeError):
            delattr(cfg, "quantization_config")
        if getattr(cfg, "quantization_config", None) is not None:  # a class attribute default
            cfg.quantization_config = None
    return model


def convert_gguf(gguf: str | Path, out: str | Path) -> Path:
    """Dequantize the GGUF file ``gguf`` into the Hugging Face folder ``out`` (safetensors, float32).

    Done once: ``out`` is reused while it was made from the same GGUF content. Several processes
    asking at once wait on a file lock and one converts; the folder appears under its name only
    when complete (written to a temporary name, then renamed), so a killed conversion leaves
    nothing half-made in its place.
    """
    gguf, out = Path(gguf).resolve(), Path(out)
    source = content_identity(gguf)
    if _converted(out, source):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    import fcntl

    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _converted(out, source):
            return out
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as err:  # pragma: no cover - dependencies
            raise EngineError(
                "engine 'transformers' needs the 'train' extra (transformers, torch, gguf): "
                "pip install 'arena-learning[train]'"
            ) from err
        tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        except ImportError as err:
            raise EngineError(
                f"loading a GGUF into transformers needs the 'train' extra's gguf: pip install 'arena-learning[train]' "
                f"({err})"
            ) from err
        except (OSError, ValueError, RuntimeError) as err:
            raise EngineError(f"transformers could not load the GGUF {gguf}: {err}") from err
        clear_quantization(model)
        try:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            (tmp / SOURCE_MARK).write_text(json.dumps({"gguf": str(gguf), "identity": source}))
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        del model
    return out


def _converted(out: Path, source: str) -> bool:
    try:
        mark = json.loads((out / SOURCE_MARK).read_text())
    except (OSError, ValueError):
        return False
    return mark.get("identity") == source and (out / "config.json").is_file()


def bundled_hf_folder() -> Path:
    """Return the bundled model as a Hugging Face folder (converted from the GGUF on first use)."""
    gguf = bundled_model_path()
    return convert_gguf(gguf, cache_dir() / BUNDLED_HF_NAME)


def resolve_hf_folder(model: str) -> Path:
    """Return the Hugging Face folder a transformers ModelSpec names: a folder, a GGUF file, a registered model
    name ('bundled', 'qwen2.5-coder-0.5b-instruct': converted from its GGUF once), a Hugging Face repo id (its
    snapshot; with a GGUF file, that file converted) or an Ollama tag (its GGUF converted)."""
    registered = lookup(model)
    if registered is not None and registered.name == "gemma-3-270m":
        return bundled_hf_folder()
    path = model_path(model) if registered is not None else locate(model, folder=True)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise EngineError(f"{path} is not a Hugging Face model folder (it has no config.json)")
        return path
    if path.name == BUNDLED_NAME and path != Path(model).expanduser():
        return bundled_hf_folder()  # a hub or Ollama name of the bundled file's bytes (model_names: its link's name)
    if path.is_file() and path.suffix == ".gguf":
        digest = content_identity(path).split(":")[1][:16]
        return convert_gguf(path, cache_dir() / "hf-from-gguf" / f"{path.stem}-{digest}")
    if path.name == BUNDLED_NAME:
        return bundled_hf_folder()
    raise EngineError(
        f"model not found: {path} (give a Hugging Face model folder, a .gguf file, a Hugging Face repo id "
        f"(ORG/NAME), an Ollama tag (NAME:TAG), or 'bundled' for the built-in model)"
    )


def converted_hf_folder(model: str) -> Path | None:
    """Return the folder ``resolve_hf_folder(model)`` would return if it needs no conversion now (a folder, or a
    GGUF converted before), else None: for a caller that must not convert (``arena plan``)."""
    registered = lookup(model)
    if registered is not None and registered.name == "gemma-3-270m":
        gguf, out = bundled_model_path(), cache_dir() / BUNDLED_HF_NAME
    else:
        if registered is not None:
            path = model_path(model)
        else:
            try:  # what the hub's cache or the Ollama store hold; nothing is downloaded
                path = locate(model, folder=True, download=False)
            except ArenaError:
                return None
        if path.is_dir():
            return path if (path / "config.json").is_file() else None
        if path.name == BUNDLED_NAME:
            gguf, out = bundled_model_path(), cache_dir() / BUNDLED_HF_NAME
        elif path.is_file() and path.suffix == ".gguf":
            digest = content_identity(path).split(":")[1][:16]
            gguf, out = path, cache_dir() / "hf-from-gguf" / f"{path.stem}-{digest}"
        else:
            return None
    return out if _converted(out, content_identity(Path(gguf).resolve())) else None


# ---- loading ------------------------------------------------------------------------


def _torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_model(folder: str | Path, dtype: str = "float32") -> tuple[Any, Any]:
    """Return (model, tokenizer) of ``folder``, shared by every engine that names the same content."""
    folder = Path(folder)
    key = (str(folder.resolve()), content_identity(folder), dtype)

    def load() -> tuple[Any, Any]:
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as err:  # pragma: no cover - dependencies
            raise EngineError("engine 'transformers' needs the 'train' extra (transformers, torch): "
                              "pip install 'arena-learning[train]'") from err
        # A folder retrained in place replaces its older entry (the old weights are never asked again).
        _MODELS.drop(lambda k: k[0] == key[0])
        try:
            tok = AutoTokenizer.from_pretrained(str(folder))
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=_torch_dtype(dtype))
        except (OSError, ValueError) as err:
            raise EngineError(f"transformers could not load {folder}: {err}") from err
        clear_quantization(model)
        model.eval()
        import torch

        if torch.cuda.is_available():  # a GPU machine (a flywheel at scale) generates there
            model.to("cuda")  # type: ignore[arg-type]  # transformers' stubs type .to() as PreTrainedModel's
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return model, tok

    return _MODELS.get(key, load)


def release_models() -> None:
    """Drop every loaded model (before training in the same process, say)."""
    _MODELS.drop()
    import gc

    gc.collect()


# ---- the engine --------------------------------------------------------------------


class TransformersEngine(BatchedEngine):
    kind = "transformers"
    in_process = True
    worker = _WORKER

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.folder = resolve_hf_folder(spec.model)
        self._model_id: str | None = None

    @property
    def model_id(self) -> str:
        # The folder's name (for people) and a hash of its content: a model retrained into the same folder
        # is a new model; a copied folder keeps its calls.
        if self._model_id is None:
            self._model_id = f"{self.folder.name}@{content_identity(self.folder)[:23]}"
        return self._model_id

    @property
    def concurrency(self) -> int:
        return self.spec.batch_size

    @property
    def in_flight(self) -> int:
        return 2 * self.spec.batch_size

    def key_params(self, request: Request) -> dict[str, Any]:
        params = super().key_params(request)
        params["dtype"] = self.spec.dtype  # float32 and bfloat16 answers differ
        return params

    def take_batch(self) -> list[tuple[Request, asyncio.Future]]:
        # Requests with the same sampling params, up to the batch limit, in the order queued.
        first, _ = self._pending[0]
        group = self._group(first)
        batch = [(r, f) for r, f in self._pending if self._group(r) == group][: self._batch_limit(first)]
        taken = {id(f) for _, f in batch}
        self._pending = [(r, f) for r, f in self._pending if id(f) not in taken]
        return batch

    def _params(self, request: Request) -> dict[str, Any]:
        return {**self.default_params(), **request.params}

    def _group(self, request: Request) -> str:
        p = self._params(request)
        keep = {k: p.get(k) for k in ("max_tokens", "temperature", "top_p", "stop")}  # seeds are per row
        keep["raw"] = request.prompt is not None
        return json.dumps(keep, sort_keys=True, default=str)

    def _batch_limit(self, request: Request) -> int:
        return self.spec.batch_size

    def render(self, request: Request, tokenizer: Any) -> tuple[str, list[str], bool]:
        """Return (text to continue, stop strings, whether the tokenizer adds special tokens)."""
        stop = list(self._params(request).get("stop") or [])
        if request.messages is None:
            return request.prompt or "", stop, True
        if self.spec.mode == "completion":
            fmt = self.spec.prompt_format
            return render_completion_prompt(fmt, request.messages), completion_stops(fmt, stop), True
        template = self.spec.chat_template or getattr(tokenizer, "chat_template", None)
        if not template:
            raise RequestTooLarge(
                f"model {self.spec.name!r}: {self.folder} has no chat template; set mode: completion (with a "
                f"prompt_format) or chat_template"
            )
        # The template writes real control tokens; the messages' text must not (control_tokens.py).
        text = tokenizer.apply_chat_template(
            neutralise_messages(request.messages), chat_template=self.spec.chat_template, add_generation_prompt=True,
            tokenize=False,
        )
        return text, stop, False

    def generate_batch(self, requests: list[Request]) -> list[Completion | BaseException]:
        """Generate the completions of ``requests`` (same sampling params) as one batch; run in the worker."""
        import torch

        model, tok = load_model(self.folder, self.spec.dtype)
        if self.spec.n_threads:
            torch.set_num_threads(self.spec.n_threads)
        params = self._params(requests[0])
        out: list[Completion | BaseException | None] = [None] * len(requests)
        texts, stops, idx = [], [], []
        special = True
        for i, r in enumerate(requests):
            try:
                text, stop, special = self.render(r, tok)
            except CallFailed as err:
                out[i] = err
                continue
            texts.append(text)
            stops.append(stop)
            idx.append(i)
        if not texts:
            return out  # type: ignore[return-value]  # every slot is filled by now (a completion or an error)
        start = time.perf_counter()
        tok.padding_side = "left"
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=special, split_special_tokens=special)
        lengths = enc["attention_mask"].sum(dim=1).tolist()
        too_long = [j for j, n in enumerate(lengths) if n > self.spec.n_ctx]
        for j in too_long:
            out[idx[j]] = RequestTooLarge(
                f"transformers: the prompt has {lengths[j]} tokens, more than n_ctx={self.spec.n_ctx} of model "
                f"{self.spec.name!r} (raise n_ctx)"
            )
        if too_long:
            keep = [j for j in range(len(texts)) if j not in set(too_long)]
            if not keep:
                return out  # type: ignore[return-value]  # every slot is filled by now (a completion or an error)
            texts, stops, idx = [texts[j] for j in keep], [stops[j] for j in keep], [idx[j] for j in keep]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=special,
                      split_special_tokens=special)
            lengths = enc["attention_mask"].sum(dim=1).tolist()
        all_stops = sorted({s for ss in stops for s in ss})
        gen: dict[str, Any] = {
            "max_new_tokens": params["max_tokens"],
            "pad_token_id": tok.pad_token_id,
        }
        gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if params["temperature"] > 0:
            from transformers import LogitsProcessorList

            seeds = [self._params(requests[i]).get("seed") for i in idx]
            gen["logits_processor"] = LogitsProcessorList([RowSampler(
                [row_seed(s, t) for s, t in zip(seeds, texts)], float(params["temperature"]),
                float(params.get("top_p") or 1.0))])
        if all_stops:
            gen.update(stop_strings=all_stops, tokenizer=tok)
        try:
            with torch.inference_mode():
                seqs = model.generate(**enc.to(model.device), **gen)
        except (RuntimeError, ValueError) as err:
            raise CallFailed(f"transformers: generation failed: {err}") from err
        elapsed = time.perf_counter() - start
        new = seqs[:, enc["input_ids"].shape[1]:]
        eos = set(_as_list(getattr(model.generation_config, "eos_token_id", None)) + _as_list(tok.eos_token_id))
        for j, row in enumerate(new.tolist()):
            n_tokens, ended = 0, False
            for t in row:
                if t in eos:
                    ended = True
                    break
                if t == tok.pad_token_id and all(x == tok.pad_token_id for x in row[n_tokens:]):
                    ended = True
                    break
                n_tokens += 1
            text = tok.decode(row[:n_tokens], skip_special_tokens=True)
            cut = [text.find(s) for s in stops[j] if s and s in text]
            if cut:
                text, ended = text[: min(cut)], True
            if request_strips(self.spec, requests[idx[j]]):
                text = text.strip()
            out[idx[j]] = Completion(
                text=text,
                tokens_in=int(lengths[j]),
                tokens_out=n_tokens,
                latency_s=elapsed / len(texts),
                finish_reason="stop" if ended or n_tokens < params["max_tokens"] else "length",
            )
        return out  # type: ignore[return-value]  # every slot is filled by now (a completion or an error)


def row_seed(seed: int | None, prompt: str) -> int | None:
    """Return the seed of one sampled row: its request's seed and its prompt's text (None: unseeded)."""
    if seed is None:
        return None
    return (int(seed) * 1_000_003 + zlib.crc32(prompt.encode("utf-8"))) % 2**63


class RowSampler:
    """A logits processor that samples each row with its own generator and leaves greedy search that token.

    ``generate(do_sample=True)`` draws every row from one global generator, so a row's sample
    depends on the rows beside it and on their order; here row i draws from ``torch.Generator``
    seeded ``seeds[i]`` (at temperature ``temperature``, nucleus ``top_p``), and its scores become
    0 for the drawn token and -inf elsewhere, which greedy decoding then takes.
    """

    def __init__(self, seeds: list[int | None], temperature: float, top_p: float = 1.0):
        import torch

        self.generators = []
        for s in seeds:
            g = torch.Generator()
            if s is None:
                g.seed()
            else:
                g.manual_seed(s)
            self.generators.append(g)
        self.temperature = temperature
        self.top_p = top_p

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            ranked, order = probs.sort(dim=-1, descending=True)
            drop = ranked.cumsum(dim=-1) - ranked > self.top_p  # keep the smallest set reaching top_p
            ranked = ranked.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, ranked)
        out = torch.full_like(scores, float("-inf"))
        for i, g in enumerate(self.generators):
            token = torch.multinomial(probs[i], 1, generator=g)
            out[i, token] = 0.0
        return out


def request_strips(spec: ModelSpec, request: Request) -> bool:
    """Whether the completion of ``request`` is stripped (completion-mode conversations, as llama.cpp does)."""
    return request.messages is not None and spec.mode == "completion" and spec.prompt_format.strip_answer


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [int(x)]
