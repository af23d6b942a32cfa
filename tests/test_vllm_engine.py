"""The vLLM engine: its translation of requests (no GPU needed), clear errors without vLLM or a GPU, and an
end-to-end run where a GPU machine with vLLM is available."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess

import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine, engine_class
from arena_learning.engines.base import Engine, Request
from arena_learning.engines.vllm_engine import VLLMEngine, completion_of, require_gpu, sampling_kwargs
from arena_learning.errors import EngineError

from .conftest import ARENA, write_config

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def spec(**kw) -> ModelSpec:
    return ModelSpec.model_validate({"name": "v", "engine": "vllm", "model": "some/model", **kw})


def unloaded(s: ModelSpec) -> VLLMEngine:
    """The engine's request handling without a model (those methods read only the spec)."""
    engine = VLLMEngine.__new__(VLLMEngine)
    Engine.__init__(engine, s)
    return engine


def test_sampling_params_and_guided_json():
    schema = {"type": "object", "properties": {"score_a": {"type": "integer"}}, "required": ["score_a"]}
    kw = sampling_kwargs({"max_tokens": 64, "temperature": 0.0, "top_p": 1.0, "seed": 3, "json_schema": schema},
                         ["\n"])
    assert kw == {"max_tokens": 64, "temperature": 0.0, "top_p": 1.0, "seed": 3, "stop": ["\n"],
                  "structured_outputs": {"json": schema}}
    assert sampling_kwargs({"max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "seed": 0}, [])["stop"] is None


def test_chat_and_completion_requests_are_split_and_rendered():
    chat = unloaded(spec(mode="chat"))
    reqs = [Request(messages=[{"role": "user", "content": "hi"}]), Request(prompt="raw text")]
    assert chat.split_batch(reqs) == ([0], [1])
    assert chat.text_prompt(reqs[1]) == ("raw text", [])
    base = unloaded(spec(mode="completion", params={"stop": ["\n"]}))
    assert base.split_batch(reqs) == ([], [0, 1])
    text, stop = base.text_prompt(reqs[0])
    assert text == "Question: hi\nAnswer:" and stop == ["\n", "Question:"]
    # The ledger keys vLLM's calls on the spec's dtype too (float32 and bfloat16 answers differ).
    assert chat.key_params(reqs[0])["dtype"] == "float32"


def test_completion_of_a_request_output():
    class Out:  # the two attributes of vllm.RequestOutput / CompletionOutput that are read
        def __init__(self, **kw):
            self.__dict__.update(kw)

    out = Out(prompt_token_ids=[1, 2, 3], outputs=[Out(text="Paris", token_ids=[7, 8], finish_reason="stop")])
    comp = completion_of(out, 0.5)
    assert (comp.text, comp.tokens_in, comp.tokens_out, comp.finish_reason) == ("Paris", 3, 2, "stop")


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here: the missing-vLLM message cannot show")
def test_without_vllm_the_engine_says_how_to_proceed(tmp_path):
    assert engine_class(spec()) is VLLMEngine  # the class imports without vLLM
    with pytest.raises(EngineError, match="pip install vllm.*engine: openai"):
        build_engine(spec())
    cfg = write_config(tmp_path / "v.yaml", """
name: v
tasks: {n: 3}
models:
  - {name: a, engine: vllm, model: some/model}
  - {name: b, engine: vllm, model: some/model}
""")
    proc = subprocess.run([*ARENA, "answer", str(cfg), "-w", str(tmp_path / "ws")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    # the config's check, before any work: the extra, its pip command, and what to do without a GPU
    assert re.search(r"needs 'vllm' for model 'a' .*pip install 'arena-learning\[vllm\]'.*vllm serve MODEL.*"
                     r"engine: openai", proc.stderr), proc.stderr


@pytest.mark.skipif(cuda(), reason="a CUDA GPU is present: the no-GPU message cannot show")
def test_without_a_gpu_the_engine_says_so():
    with pytest.raises(EngineError, match="needs a CUDA GPU.*vllm serve MODEL"):
        require_gpu("v")


@pytest.mark.skipif(not (HAVE_VLLM and cuda()),
                    reason="vLLM end to end needs vLLM and a CUDA GPU (on a GPU machine: pip install vllm; "
                           "pytest tests/test_vllm_engine.py)")
def test_vllm_end_to_end_on_the_bundled_model(tmp_path):  # pragma: no cover - GPU machines only
    from arena_learning.engines.calls import run_requests
    from arena_learning.engines.transformers_engine import bundled_hf_folder
    from arena_learning.store import Store

    folder = bundled_hf_folder()
    s = spec(model=str(folder), mode="completion", params={"max_tokens": 16, "stop": ["\n"]},
             engine_args={"gpu_memory_utilization": 0.3})
    engine = build_engine(s)
    schema = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}
    reqs = [Request(messages=[{"role": "user", "content": "What is the capital of France?"}]),
            Request(prompt="Rate 1-10 as JSON: ", params={"json_schema": schema, "max_tokens": 24})]
    with Store(tmp_path / "ws") as store:
        got = run_requests(store, engine, reqs, show_progress=False)
        again = run_requests(store, build_engine(s), reqs, show_progress=False)
    assert got[0] is not None and "Paris" in got[0].text
    assert "score" in json.loads(got[1].text)
    assert [c.text for c in again] == [c.text for c in got]
