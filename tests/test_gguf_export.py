"""A Hugging Face folder exported to GGUF (engines/gguf_export.py) and the flywheel's ``training.serve_as``.

The roundtrip runs on the real bundled model: its GGUF dequantized into a Hugging Face folder
(``bundled_hf_folder``) and exported back holds the bundled file's tensors (dequantized) exactly,
and llama.cpp on the export answers as transformers does on the folder.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from arena_learning.config import ModelSpec, validate_config
from arena_learning.engines.gguf_export import export_gguf, marker_path
from arena_learning.errors import ArenaError, ConfigError
from arena_learning.flywheel.rounds import Flywheel
from arena_learning.flywheel.serving import served_spec
from arena_learning.flywheel.settings import FlywheelConfig, TrainingConfig

from .test_flywheel_export import make_tiny
from .test_flywheel_rounds import CONFIG

ROOT = Path(__file__).resolve().parents[1]


def tensor_data(path, tensor):
    """Return a GGUF tensor's values as float32 (dequantized), read from the file at its offset."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    kind = GGMLQuantizationType(tensor.type)
    block, size = GGML_QUANT_SIZES[kind]
    n = int(np.prod(tensor.shape))
    raw = np.memmap(path, np.uint8, "r", tensor.offset, n * size // block)
    return dequantize(raw, kind).reshape(-1).astype(np.float32)


def test_the_export_writer_packs_every_value_type_as_the_gguf_library_does(tmp_path):
    """``gguf_writer()`` packs arrays whole (numpy, one join): the same file, byte for byte, as ``gguf.GGUFWriter``
    on a key of every value type and arrays of every item type, typed as a template's fields are; what it leaves to
    the library (an untyped or empty array, an array of arrays) is the library's too."""
    import gguf

    from arena_learning.engines import gguf_export

    T = gguf.GGUFValueType
    kvs = [("u8", 7, T.UINT8, None), ("i8", -7, T.INT8, None), ("f32", 0.1, T.FLOAT32, None),
           ("yes", True, T.BOOL, None), ("s", "Grüße, 世界", T.STRING, None), ("f64", 0.1, T.FLOAT64, None),
           ("tokens", ["<s>", "", "▁der", "ü", "\n", "世界"], T.ARRAY, T.STRING),
           ("scores", [0.0, -1.5, 3.25, 0.1, float("inf")], T.ARRAY, T.FLOAT32),
           ("types", [1, 2, 3, -4], T.ARRAY, T.INT32), ("bytes", [0, 255], T.ARRAY, T.UINT8),
           ("i8s", [-128, 127], T.ARRAY, T.INT8), ("u16s", [0, 65535], T.ARRAY, T.UINT16),
           ("i16s", [-32768, 5], T.ARRAY, T.INT16), ("u32s", [2**32 - 1], T.ARRAY, T.UINT32),
           ("u64s", [2**64 - 1, 0], T.ARRAY, T.UINT64), ("i64s", [-(2**63), 2**40], T.ARRAY, T.INT64),
           ("f64s", [0.1, -2.5e300], T.ARRAY, T.FLOAT64), ("flags", [True, False, True], T.ARRAY, T.BOOL),
           ("untyped", [4, 5], T.ARRAY, None), ("nested", [[1, 2], [3]], T.ARRAY, None)]

    def write(cls, path):
        w = cls(str(path), arch="llama")
        for key, val, vtype, sub in kvs:
            w.add_key_value(f"t.{key}", val, vtype, sub_type=sub)
        w.add_tensor("a.weight", np.arange(15, dtype=np.float32).reshape(3, 5))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()

    assert gguf_export.gguf_writer() is not gguf.GGUFWriter
    assert write(gguf_export.gguf_writer(), tmp_path / "fast.gguf") == write(gguf.GGUFWriter, tmp_path / "lib.gguf")


def test_the_f16_conversion_is_numpys_bit_for_bit():
    """The export's float32 -> float16 (through torch) rounds as numpy's ``astype`` does: ties to even, subnormals,
    overflow to infinity, signed zeros, on every exponent a float16 can hold and beyond."""
    from arena_learning.engines.gguf_export import to_f16

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200_000) * np.exp2(rng.integers(-30, 20, 200_000))).astype(np.float32)
    halves = np.arange(0, 2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)].astype(np.float32)
    ties = (finite[:-1] + (finite[1:] - finite[:-1]) / 2).astype(np.float32)  # halfway between neighbours
    edge = np.array([0.0, -0.0, 65504.0, 65520.0, -65520.0, 1e9, -1e9, 6e-8, 3e-8, -3e-8, np.inf, -np.inf],
                    np.float32)
    for arr in (x, finite, ties, edge, x.reshape(400, 500)):
        with np.errstate(over="ignore"):  # beyond 65504: infinity, as wanted
            got, want = to_f16(arr), arr.astype(np.float16)
        assert got.dtype == np.float16 and got.shape == arr.shape
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def tiny_gemma3(folder):
    """Save a tiny random Gemma 3 (hidden 64, 2 layers, vocab 300): the bundled architecture, another shape."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=128)
    torch.manual_seed(0)
    Gemma3ForCausalLM(cfg).save_pretrained(folder)
    return folder


def test_folders_that_do_not_fit_the_template_are_clear_errors(tmp_path):
    with pytest.raises(ArenaError, match="is a 'llama' model.*engine 'transformers'"):
        export_gguf(make_tiny(tmp_path / "llama"), tmp_path / "llama.gguf", quantize="f16")
    with pytest.raises(ArenaError, match="does not have the shape.*hidden_size 64 \\(template embedding_length 640\\)"
                                         ".*vocab_size 300"):
        export_gguf(tiny_gemma3(tmp_path / "gemma"), tmp_path / "gemma.gguf", quantize="f16")
    with pytest.raises(ArenaError, match="no config.json"):
        export_gguf(tmp_path, tmp_path / "x.gguf")
    with pytest.raises(ArenaError, match="quantize must be one of"):
        export_gguf(tmp_path / "gemma", tmp_path / "x.gguf", quantize="q8")  # type: ignore[arg-type]
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*.tmp*"))  # nothing half-made


def test_serve_as_is_a_training_option_absent_from_dumps_while_default():
    assert "serve_as" not in TrainingConfig().model_dump() and "serve_quantize" not in TrainingConfig().model_dump()
    data = json.loads(json.dumps(CONFIG))
    cfg = validate_config({**data, "training": {**data["training"], "serve_as": "llamacpp"}}, FlywheelConfig, "t")
    assert cfg.training.serve_as == "llamacpp" and cfg.training.serve_quantize == "f16"
    assert cfg.training.model_dump()["serve_as"] == "llamacpp"
    with pytest.raises(ConfigError, match="serve_as"):
        validate_config({**data, "training": {"serve_as": "vllm"}}, FlywheelConfig, "t")
    with pytest.raises(ConfigError, match="serve_quantize"):
        validate_config({**data, "training": {"serve_as": "llamacpp", "serve_quantize": "q2"}}, FlywheelConfig, "t")


def test_the_served_spec_keeps_the_targets_prompting():
    target = ModelSpec.model_validate({**CONFIG["target"], "model": "/w/round-0/0-sft/model", "batch_size": 8,
                                       "n_threads": 2})
    spec = served_spec(target, "/w/round-0/0-sft/model.gguf")
    assert (spec.engine, spec.model, spec.parallel) == ("llamacpp", "/w/round-0/0-sft/model.gguf", 8)
    assert (spec.name, spec.mode, spec.prompt_format, spec.params, spec.n_threads) == (
        target.name, target.mode, target.prompt_format, target.params, target.n_threads)


def test_the_template_reader_reads_every_value_type_as_the_gguf_library_does(tmp_path):
    """``read_template_meta`` (the export's fast parse) against ``gguf.GGUFReader`` on a file with a key of
    every value type, arrays of strings and numbers, unicode and empty ones; an array of arrays, which it does
    not parse, is read by the library instead."""
    import gguf

    from arena_learning.engines import gguf_export

    T = gguf.GGUFValueType
    kvs = [("u8", 7, T.UINT8), ("i8", -7, T.INT8), ("u16", 700, T.UINT16), ("i16", -700, T.INT16),
           ("u32", 70000, T.UINT32), ("i32", -70000, T.INT32), ("f32", 0.1, T.FLOAT32), ("yes", True, T.BOOL),
           ("s", "Grüße, 世界", T.STRING), ("u64", 2**40, T.UINT64), ("i64", -(2**40), T.INT64),
           ("f64", 0.1, T.FLOAT64)]

    def write(path, nested):
        w = gguf.GGUFWriter(str(path), arch="llama")
        for key, val, vtype in kvs:
            w.add_key_value(f"t.{key}", val, vtype)
        w.add_array("t.tokens", ["<s>", "", "▁der", "ü", "\n"])
        w.add_array("t.scores", [0.0, -1.5, 3.25])
        w.add_array("t.types", [1, 2, 3])
        w.add_array("t.empty", [])
        if nested:
            w.add_array("t.nested", [[1, 2], [3]])
        w.add_tensor("a.weight", np.zeros((3, 5), np.float32))
        w.add_tensor("b.bias", np.ones(4, np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    flat = str(write(tmp_path / "flat.gguf", nested=False))
    fast, lib = gguf_export.read_template_meta(flat), gguf_export._library_meta(flat)
    assert list(fast.fields) == list(lib.fields) and fast.tensors == lib.tensors
    assert [(t.name, t.shape) for t in fast.tensors] == [("a.weight", (3, 5)), ("b.bias", (4,))]
    assert tensor_data(flat, fast.tensors[1]).tolist() == [1.0] * 4  # the offset is the data's
    for key, field in lib.fields.items():
        assert fast.fields[key] == field, key
        assert type(fast.get(key)) is type(field.value), key
    assert fast.get("t.tokens") == ["<s>", "", "▁der", "ü", "\n"] and fast.get("t.f32") == np.float32(0.1)
    nested = str(write(tmp_path / "nested.gguf", nested=True))
    with pytest.raises(gguf_export._Unsupported, match="t.nested"):
        gguf_export.read_template_meta(nested)
    assert gguf_export._reader(nested, 0, 0).get("t.u64") == 2**40  # the library's parse instead
    (tmp_path / "not.gguf").write_bytes(b"not a GGUF file at all, but long enough to hold a header")
    with pytest.raises(ValueError, match="magic"):  # no GGUF at all: the library's own error
        gguf_export._reader(str(tmp_path / "not.gguf"), 0, 0)


@pytest.mark.slow
def test_the_export_holds_the_bundled_tensors_and_is_reused(tmp_path):
    """bundled GGUF -> HF folder (float32) -> GGUF f32: every tensor equals the bundled one dequantized."""
    from arena_learning.engines.bundled import bundled_model_path
    from arena_learning.engines.gguf_export import read_template_meta
    from arena_learning.engines.transformers_engine import bundled_hf_folder

    out = export_gguf(bundled_hf_folder(), tmp_path / "m.gguf", quantize="f32")
    mtime = out.stat().st_mtime_ns
    assert export_gguf(bundled_hf_folder(), out, quantize="f32").stat().st_mtime_ns == mtime  # cached
    # read with the export's own reader, which the test above holds to gguf.GGUFReader on every value type
    orig, new = read_template_meta(str(bundled_model_path())), read_template_meta(str(out))
    assert [(t.name, t.shape) for t in orig.tensors] == [(t.name, t.shape) for t in new.tensors]
    worst = 0.0
    for a, b in zip(orig.tensors, new.tensors):
        got = tensor_data(str(out), b)
        worst = max(worst, float(np.abs(tensor_data(str(bundled_model_path()), a).reshape(got.shape) - got).max()))
    assert worst < 1e-6, worst  # norms go w -> w - 1 -> w in float32: only rounding
    assert new.get("general.file_type") == 0
    keys = set(orig.fields) - {"general.quantization_version"}
    assert keys == set(new.fields)
    copied = keys - {"general.file_type"}  # every other key/value is the template's, tokenizer included
    assert all(new.fields[k] == orig.fields[k] for k in copied)
    assert len(new.get("tokenizer.ggml.tokens")) == 262144
    marker_path(out).unlink()  # an export whose marker is gone (killed before it was written) is made again
    assert export_gguf(bundled_hf_folder(), out, quantize="f32").stat().st_mtime_ns != mtime


@pytest.mark.slow
def test_the_flywheel_serves_the_base_through_llamacpp_with_the_transformers_answers(tmp_path):
    """serve_as llamacpp: the base's f16 export answers 16 test prompts as transformers float32 does."""
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import run_requests
    from arena_learning.store import Store
    from arena_learning.tasks import generate_tasks

    data = json.loads(json.dumps(CONFIG))
    cfg = validate_config({**data, "training": {"serve_as": "llamacpp"}}, FlywheelConfig, "t")
    base = cfg.target.model_copy(update={"name": "student-base", "batch_size": 8})
    reqs = [Request(messages=[{"role": "user", "content": p.turns[0]}]) for p in generate_tasks(16, seed=0)]
    with Store(tmp_path / "ws") as store:
        fw = Flywheel(cfg, store, show_progress=False, say=lambda m: None)
        fw.serve_from(base, None)
        served = fw.served(base)
        assert served.engine == "llamacpp" and served.model.endswith("-f16.gguf") and served.parallel == 8
        assert fw.served(cfg.references[0]) is cfg.references[0]  # a reference is served as it is
        answers = {}
        for spec in (base, served):
            with tempfile.TemporaryDirectory() as tmp, Store(tmp) as s:
                answers[spec.engine] = [c.text for c in run_requests(s, build_engine(spec), reqs,
                                                                     show_progress=False)]
    same = sum(a == b for a, b in zip(answers["transformers"], answers["llamacpp"]))
    assert same >= 14, (same, answers)  # measured: 16/16 (docs/results.md: 32/32 at max_tokens 16)


RESUME = """
import json, sys
from arena_learning.config import validate_config
from arena_learning.flywheel.rounds import Flywheel
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.store import Store

data, ws, model, gguf = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
cfg = validate_config(data, FlywheelConfig, "resume")
said = []
with Store(ws) as store:
    fw = Flywheel(cfg, store, show_progress=False, say=said.append)
    spec = cfg.target.model_copy(update={"name": "student-r0-sft", "model": model})
    fw.serve_from(spec, __import__("pathlib").Path(gguf))
    print(json.dumps({"model": fw.served(spec).model, "said": said}))
"""


@pytest.mark.slow
def test_a_resumed_flywheel_reuses_a_finished_stages_export_and_never_writes_it_again(tmp_path):
    """A finished stage's STAGE/model.gguf is exported once; a resumed run (a new process) reuses it and says so."""
    import os
    import subprocess
    import sys

    from arena_learning.engines.gguf_export import export_current
    from arena_learning.engines.transformers_engine import bundled_hf_folder

    data = json.loads(json.dumps(CONFIG))
    data = {**data, "training": {"serve_as": "llamacpp", "serve_quantize": "f16"}}
    stage = tmp_path / "ws" / "flywheel" / "round-0" / "0-sft"
    stage.mkdir(parents=True)
    (stage / "model").symlink_to(bundled_hf_folder(), target_is_directory=True)  # a trained stage's folder
    gguf = stage / "model.gguf"

    def run() -> dict:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run([sys.executable, "-c", RESUME, json.dumps(data), str(tmp_path / "ws"),
                               str(stage / "model"), str(gguf)], capture_output=True, text=True, env=env,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run()
    assert first["model"] == str(gguf) and any("exporting" in m for m in first["said"]), first
    written = gguf.stat()
    assert export_current(stage / "model", gguf, quantize="f16")
    resumed = run()  # the resume: another process, nothing in memory
    assert resumed["model"] == str(gguf)
    assert not any("exporting" in m for m in resumed["said"]) and any("reused" in m for m in resumed["said"]), resumed
    again = gguf.stat()
    assert (again.st_ino, again.st_mtime_ns, again.st_size) == (written.st_ino, written.st_mtime_ns, written.st_size)
    # the control: an export whose marker is gone (a run killed between the rename and the marker) is made again
    marker_path(gguf).unlink()
    assert not export_current(stage / "model", gguf, quantize="f16")
    redone = run()
    assert any("exporting" in m for m in redone["said"]) and gguf.stat().st_mtime_ns != written.st_mtime_ns


@pytest.mark.slow
def test_a_qwen2_folder_exports_with_its_own_gguf_as_template_and_holds_its_tensors(tmp_path):
    """Qwen2.5-Coder 0.5B (registry) GGUF -> HF folder -> GGUF f32 with the Qwen file as template: every tensor
    (q/k/v biases and the stored head included) equals the original dequantized, and the flywheel picks a GGUF
    target's own file as the template of its lineage's exports."""
    from arena_learning.engines.bundled import bundled_model_path, resolve_model_path
    from arena_learning.engines.gguf_export import read_template_meta
    from arena_learning.engines.transformers_engine import resolve_hf_folder
    from arena_learning.store import Store

    name = "qwen2.5-coder-0.5b-instruct"
    template = resolve_model_path(name)
    folder = resolve_hf_folder(name)
    with pytest.raises(ArenaError, match="is a 'qwen2' model, but the template .* is 'gemma3'"):
        export_gguf(folder, tmp_path / "wrong.gguf", quantize="f32")  # the default template is the bundled gemma
    out = export_gguf(folder, tmp_path / "q.gguf", template_gguf=template, quantize="f32")
    # read with the export's own reader (held to gguf.GGUFReader on every value type above): a tenth of the time
    orig, new = read_template_meta(str(template)), read_template_meta(str(out))
    assert [(t.name, t.shape) for t in orig.tensors] == [(t.name, t.shape) for t in new.tensors]
    assert {"blk.0.attn_q.bias", "output.weight"} <= {t.name for t in new.tensors}
    worst = 0.0
    for a, b in zip(orig.tensors, new.tensors):
        got = tensor_data(str(out), b)
        worst = max(worst, float(np.abs(tensor_data(str(template), a).reshape(got.shape) - got).max()))
    assert worst < 1e-6, worst
    data = json.loads(json.dumps(CONFIG))
    for model, want in ((name, template), ("bundled", bundled_model_path()), (str(folder), None)):
        cfg = validate_config({**data, "target": {**data["target"], "model": model},
                               "training": {"serve_as": "llamacpp"}}, FlywheelConfig, "t")
        with Store(tmp_path / "ws") as store:
            assert Flywheel(cfg, store, show_progress=False, say=lambda m: None).template_gguf() == want, model
