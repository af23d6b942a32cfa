"""A Hugging Face model folder (a trained flywheel stage) exported to GGUF, to serve through llama.cpp.

The flywheel trains the bundled Gemma 3 270M with transformers and saves a plain safetensors folder;
answering the test set through transformers on 2 CPU cores is several times slower than the same
model through llama.cpp. ``export_gguf`` writes the folder's weights into a GGUF file that llama.cpp
loads, with no ``convert_hf_to_gguf.py`` on disk:

- metadata and tokenizer come from a *template* GGUF of the same architecture (default: the bundled
  model, which every flywheel student is trained from), every key/value copied but the file type;
- each tensor is written under its GGUF name (``gguf.get_tensor_name_map``, the map llama.cpp's
  converter uses), as F32, or F16 for the matrices (1-D norm vectors stay F32, as llama.cpp's
  converter keeps them);
- Gemma's RMSNorm multiplies by ``(1 + w)``; HF stores ``w``, llama.cpp stores ``1 + w``, so every
  ``*norm.weight`` gets 1 added (transformers' GGUF loader, ``Gemma2TensorProcessor`` used for
  gemma3, subtracts 1 on load). q/k are *not* permuted: that is the llama architecture's rope
  layout; llama.cpp's Gemma converters write q/k as HF has them (transformers' gemma3 loader does
  not un-permute either);
- Qwen2 (the Qwen2.5-Coder models of the registry) is written as its HF tensors are, q/k/v biases included:
  llama.cpp's ``Qwen2Model`` converter neither permutes q/k nor shifts the norms, and transformers' qwen2 GGUF
  loader undoes nothing;
- ``quantize="q4_k_m"`` then runs llama.cpp's own quantizer (``llama_model_quantize``, the
  ``llama-quantize`` tool's code) on the F16 file: the same per-tensor type choices as the bundled
  Q4_K_M file.

The shapes are checked first: a folder whose config or tensors differ from the template's (another
architecture, size or vocabulary) is refused with an ``ArenaError`` before anything is written.

The file appears under its name only when complete (written to a temporary name, then renamed),
and a marker beside it (``.<name>.source``) records what it was made from; a file whose marker does
not match the folder, the template and the quantization is made again, so an export killed halfway
is redone, never used, and exporting the same folder twice reuses the first file.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from ..errors import ArenaError
from .bundled import bundled_model_path
from .identity import content_identity

Quantize = Literal["q4_k_m", "f16", "f32"]
QUANTIZE_TYPES: tuple[str, ...] = ("q4_k_m", "f16", "f32")
EXPORT_VERSION = 1
"""Bumped when the export writes other bytes for the same input: older files are then made again."""

# HF config key -> the template GGUF's metadata key (``{arch}.`` prefixed): what must agree for the weights to fit.
SHAPE_KEYS = {
    "hidden_size": "embedding_length",
    "num_hidden_layers": "block_count",
    "intermediate_size": "feed_forward_length",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "sliding_window": "attention.sliding_window",
}
# HF model_type -> GGUF general.architecture
ARCHES = {"gemma3_text": "gemma3", "gemma3": "gemma3", "qwen2": "qwen2"}
# GGUF architecture -> the gguf package's tensor-name map of it
GGUF_ARCHES = {"gemma3": "GEMMA3", "qwen2": "QWEN2"}
ONE_PLUS_NORM = {"gemma3"}
"""Architectures whose RMSNorm scales by (1 + w): HF stores w, llama.cpp 1 + w."""


def marker_path(out_path: Path) -> Path:
    """Return the marker beside ``out_path`` that says what the file was made from."""
    return out_path.parent / f".{out_path.name}.source"


def export_gguf(hf_folder: str | Path, out_path: str | Path, *, template_gguf: str | Path | None = None,
                quantize: Quantize = "q4_k_m", threads: int | None = None) -> Path:
    """Export the Hugging Face folder ``hf_folder`` to the GGUF file ``out_path``; return ``out_path``.

    ``template_gguf`` (default: the bundled model) gives the metadata and tokenizer; ``quantize`` is
    the tensors' type: ``q4_k_m`` (llama.cpp's quantizer, about 250 MB for Gemma 3 270M), ``f16``
    (about 540 MB) or ``f32`` (about 1.1 GB, exact). Reused when ``out_path`` was made from the same
    folder content, template and quantization.
    """
    folder, out = Path(hf_folder), Path(out_path)
    template = Path(template_gguf) if template_gguf is not None else bundled_model_path()
    source = export_source(folder, template, quantize)
    if exported(out, source):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exported(out, source):
            return out
        with contextlib.suppress(FileNotFoundError):
            marker_path(out).unlink()  # the old file is no longer what the marker said
        tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
        tmp_f16 = out.parent / f".{out.name}.f16.tmp{os.getpid()}"
        try:
            if quantize == "q4_k_m":
                write_gguf(folder, template, tmp_f16, "f16")
                quantize_gguf(tmp_f16, tmp, "q4_k_m", threads=threads)
            else:
                write_gguf(folder, template, tmp, quantize)
            os.replace(tmp, out)
            marker_path(out).write_text(json.dumps(source))
        finally:
            for t in (tmp, tmp_f16):
                with contextlib.suppress(FileNotFoundError):
                    t.unlink()
    return out


def export_source(folder: Path, template: Path, quantize: str) -> dict[str, Any]:
    """Return what an export of ``folder`` is made from (its marker's content): folder and template content,
    quantization and the exporter's version."""
    if quantize not in QUANTIZE_TYPES:
        raise ArenaError(f"export_gguf: quantize must be one of {', '.join(QUANTIZE_TYPES)} (got {quantize!r})")
    if not (folder / "config.json").is_file():
        raise ArenaError(f"export to GGUF: {folder} is not a Hugging Face model folder (it has no config.json)")
    return {"folder": content_identity(folder), "template": content_identity(template), "quantize": quantize,
            "version": EXPORT_VERSION}


def export_current(hf_folder: str | Path, out_path: str | Path, *, template_gguf: str | Path | None = None,
                   quantize: Quantize = "q4_k_m") -> bool:
    """Return whether ``out_path`` is a finished export of ``hf_folder`` as it is now (``export_gguf`` reuses it)."""
    template = Path(template_gguf) if template_gguf is not None else bundled_model_path()
    return exported(Path(out_path), export_source(Path(hf_folder), template, quantize))


def exported(out: Path, source: dict[str, Any]) -> bool:
    """Whether ``out`` is a finished export of ``source`` (its marker says so and the file is there)."""
    try:
        mark = json.loads(marker_path(out).read_text())
    except (OSError, ValueError):
        return False
    return bool(mark == source and out.is_file() and out.stat().st_size > 0)


def read_hf_tensors(folder: Path) -> dict[str, Any]:
    """Return the folder's tensors by HF name, as float32 numpy arrays (every ``*.safetensors`` file)."""
    import torch
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ArenaError(f"export to GGUF: {folder} has no .safetensors weights (save the model with "
                         "save_pretrained(safe_serialization=True))")
    out: dict[str, Any] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                out[name] = st.get_tensor(name).to(torch.float32).numpy()
    return out


@dataclasses.dataclass(frozen=True)
class TemplateField:
    """One key/value of a template GGUF: its value type, its items' type for an array, and its value (a list
    for an array), as ``gguf.ReaderField.contents()`` gives it."""

    name: str
    type: int
    sub_type: int | None
    value: Any


class TemplateTensor(NamedTuple):
    """A tensor of a GGUF: its name, shape (numpy order, as the HF tensor that fills it), ggml type
    (``gguf.GGMLQuantizationType``) and where its data starts in the file."""

    name: str
    shape: tuple[int, ...]
    type: int
    offset: int


@dataclasses.dataclass(frozen=True)
class TemplateMeta:
    """What the export reads of a template GGUF: its key/values and its tensors, in file order."""

    fields: dict[str, TemplateField]
    tensors: list[TemplateTensor]

    def get(self, key: str) -> Any:
        """Return the value of ``key`` (None when the template has no such key)."""
        f = self.fields.get(key)
        return None if f is None else f.value


# GGUF value types (gguf.GGUFValueType): struct format of each fixed-size one
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_GGUF_MAGIC = 0x46554747  # b"GGUF" read as a little-endian uint32


class _Unsupported(Exception):
    """A GGUF this reader does not parse (byte order, version, nested arrays): gguf's own reader does."""


def template_reader(template: Path) -> TemplateMeta:
    """Return ``template``'s metadata and tensors, read once per process and file version."""
    st = template.resolve().stat()
    return _reader(str(template.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _reader(path: str, size: int, mtime_ns: int) -> TemplateMeta:
    try:
        return read_template_meta(path)
    except _Unsupported:
        return _library_meta(path)


def read_template_meta(path: str) -> TemplateMeta:
    """Parse a little-endian GGUF (v2, v3)'s header, key/values and tensor infos with ``struct``.

    Hand-written because ``gguf.GGUFReader`` makes a numpy view of every item of every array: the bundled
    Gemma 3's vocabulary (262,144 tokens, each with a score and a type) takes it 10-25 s on 2 cores, which every
    process that exports a flywheel stage paid; this reads the same values in well under a second (a test
    compares the two on every value type). What it does not parse (another byte order or version, an array of
    arrays) raises ``_Unsupported`` and the library reads it instead."""
    import mmap
    import struct

    import numpy as np

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)
        try:
            magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", buf, 0)
            if magic != _GGUF_MAGIC or version not in (2, 3):
                raise _Unsupported(f"magic {magic:#x}, version {version}")
            off = 24

            def string(off: int) -> tuple[str, int]:
                (n,) = struct.unpack_from("<Q", buf, off)
                return str(buf[off + 8:off + 8 + n], "utf-8"), off + 8 + n

            def scalar(kind: int, off: int) -> tuple[Any, int]:
                fmt = _SCALARS.get(kind)
                if fmt is None:
                    raise _Unsupported(f"value type {kind}")
                return struct.unpack_from("<" + fmt, buf, off)[0], off + struct.calcsize(fmt)

            fields: dict[str, TemplateField] = {}
            for _ in range(n_kv):
                key, off = string(off)
                (kind,) = struct.unpack_from("<I", buf, off)
                off += 4
                sub: int | None = None
                value: Any
                if kind == _STRING:
                    value, off = string(off)
                elif kind == _ARRAY:
                    sub, count = struct.unpack_from("<IQ", buf, off)
                    off += 12
                    if sub == _STRING:
                        value = []
                        for _ in range(count):
                            item, off = string(off)
                            value.append(item)
                    elif sub in _SCALARS:
                        dtype = np.dtype("<" + _SCALARS[sub])
                        value = np.frombuffer(buf, dtype, count, off).tolist()
                        off += dtype.itemsize * count
                    else:
                        raise _Unsupported(f"{key}: an array of value type {sub}")
                else:
                    value, off = scalar(kind, off)
                if key in fields:
                    raise _Unsupported(f"key {key} twice")
                fields[key] = TemplateField(key, kind, sub, value)
            infos = []
            for _ in range(n_tensors):
                name, off = string(off)
                (n_dims,) = struct.unpack_from("<I", buf, off)
                dims = struct.unpack_from(f"<{n_dims}Q", buf, off + 4)
                ggml_type, rel = struct.unpack_from("<IQ", buf, off + 4 + 8 * n_dims)
                off += 4 + 8 * n_dims + 12
                infos.append((name, tuple(int(d) for d in reversed(dims)), ggml_type, rel))
            align = fields["general.alignment"].value if "general.alignment" in fields else 32
            start = off + (-off) % align  # the data section: after the tensor infos, aligned
            tensors = [TemplateTensor(name, shape, kind, start + rel) for name, shape, kind, rel in infos]
        except (struct.error, UnicodeDecodeError, ValueError) as err:
            raise _Unsupported(str(err)) from err
        finally:
            buf.release()
    return TemplateMeta(fields, tensors)


def _library_meta(path: str) -> TemplateMeta:
    """``TemplateMeta`` by ``gguf.GGUFReader`` (slow on large vocabularies; reads what ``read_template_meta``
    does not, or raises its error on a file that is no GGUF)."""
    import gguf

    reader = gguf.GGUFReader(path)
    fields = {f.name: TemplateField(f.name, int(f.types[0]), int(f.types[-1]) if f.types[0] == _ARRAY else None,
                                    f.contents())
              for f in reader.fields.values() if not f.name.startswith("GGUF.")}
    tensors = [TemplateTensor(t.name, tuple(int(x) for x in reversed(t.shape.tolist())), int(t.tensor_type),
                              int(t.data_offset)) for t in reader.tensors]
    return TemplateMeta(fields, tensors)


def check_config(folder: Path, config: dict[str, Any], reader: TemplateMeta, template: Path) -> str:
    """Return the template's architecture after checking the folder's config fits it; else raise ArenaError."""
    arch = reader.get("general.architecture")
    model_type = config.get("model_type")
    if ARCHES.get(str(model_type)) != arch:
        raise ArenaError(
            f"export to GGUF: {folder} is a {model_type!r} model, but the template {template} is {arch!r} "
            f"(the export supports {', '.join(sorted(ARCHES))} folders against a template GGUF of the same "
            "architecture, such as the GGUF a flywheel student is trained from); serve this folder with engine "
            "'transformers'")
    wrong = []
    for hf_key, gguf_key in SHAPE_KEYS.items():
        want = reader.get(f"{arch}.{gguf_key}")
        have = config.get(hf_key)
        if want is not None and have is not None and int(want) != int(have):
            wrong.append(f"{hf_key} {have} (template {gguf_key} {want})")
    n_vocab = len(reader.get("tokenizer.ggml.tokens") or ())
    if config.get("vocab_size") is not None and int(config["vocab_size"]) != n_vocab:
        wrong.append(f"vocab_size {config['vocab_size']} (template has {n_vocab} tokens)")
    if wrong:
        raise ArenaError(
            f"export to GGUF: {folder} does not have the shape of the template {template}: {'; '.join(wrong)}. "
            "The export copies the template's metadata and tokenizer, so the folder must be a model trained from "
            "it; give the GGUF it was trained from as template_gguf, or serve it with engine 'transformers'")
    return str(arch)


def write_gguf(folder: Path, template: Path, out: Path, dtype: Literal["f16", "f32"]) -> None:
    """Write ``folder``'s weights with ``template``'s metadata and tokenizer to ``out`` (F16 or F32 tensors)."""
    import gguf
    import numpy as np

    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ArenaError(f"export to GGUF: cannot read {folder / 'config.json'}: {err}") from err
    config = config.get("text_config", config) if config.get("model_type") == "gemma3" else config
    reader = template_reader(template)
    arch = check_config(folder, config, reader, template)
    n_layers = int(reader.get(f"{arch}.block_count"))
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, GGUF_ARCHES[arch]), n_layers)
    want = {t.name: t.shape for t in reader.tensors}  # numpy order
    tensors = read_hf_tensors(folder)
    mapped: dict[str, Any] = {}
    unknown = []
    for hf_name, arr in tensors.items():
        name = hf_name.removeprefix("language_model.").replace("model.language_model.", "model.")
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            unknown.append(hf_name)
            continue
        mapped[gguf_name] = arr
    emb = mapped.get("token_embd.weight")
    head = mapped.pop("output.weight", None)
    if "output.weight" in want:  # the template stores a head (Qwen2.5's GGUFs do, tied in HF or not)
        if head is None and emb is not None and config.get("tie_word_embeddings", True):
            head = emb  # tied: the folder's head is its embeddings
        if head is not None:
            mapped["output.weight"] = head
    elif head is not None and emb is not None and not np.array_equal(head, emb):
        unknown.append("lm_head.weight (not tied to the embeddings, as the template's are)")
    missing = sorted(set(want) - set(mapped))
    bad_shape = [f"{n} {mapped[n].shape} (template {want[n]})" for n in sorted(set(want) & set(mapped))
                 if tuple(mapped[n].shape) != want[n]]
    extra = sorted(set(mapped) - set(want))
    if unknown or missing or bad_shape or extra:
        parts = [f"{label}: {', '.join(items[:6])}{' ...' if len(items) > 6 else ''}" for label, items in
                 (("tensors with no GGUF name", unknown), ("missing", missing), ("shapes differ", bad_shape),
                  ("not in the template", extra)) if items]
        raise ArenaError(f"export to GGUF: the tensors of {folder} do not fit the template {template}: "
                         f"{'; '.join(parts)}. Serve this folder with engine 'transformers'")
    writer = gguf_writer()(str(out), arch=arch)
    file_type = gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE:
            continue  # written by GGUFWriter itself
        if field.name in (gguf.Keys.General.FILE_TYPE, gguf.Keys.General.QUANTIZATION_VERSION):
            continue
        sub_type = gguf.GGUFValueType(field.sub_type) if field.sub_type is not None else None
        writer.add_key_value(field.name, field.value, gguf.GGUFValueType(field.type), sub_type=sub_type)
    writer.add_file_type(int(file_type))
    for name, *_ in reader.tensors:  # the template's order
        arr = mapped[name]
        if arch in ONE_PLUS_NORM and name.endswith("norm.weight"):
            arr = arr + 1.0  # Gemma's RMSNorm scales by (1 + w); llama.cpp stores 1 + w
        if dtype == "f16" and arr.ndim > 1:
            arr = to_f16(arr)
        writer.add_tensor(name, np.ascontiguousarray(arr.astype(arr.dtype, copy=False)))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


@functools.cache
def gguf_writer() -> type:
    """Return ``gguf.GGUFWriter`` with its arrays packed whole: numbers through numpy, strings in one join.

    The library packs an array item by item (a ``struct.pack`` call each): the template's tokenizer alone is three
    arrays of 262,144 items, about half a second of every export. The bytes are the library's (a test holds them
    equal on every value type); what this does not pack (a big-endian file, an array of arrays) the library does.
    """
    import struct

    import gguf
    import numpy as np

    t = gguf.GGUFValueType
    numbers = {k: np.dtype("?" if f == "?" else "<" + f) for k, f in gguf.GGUFWriter._simple_value_packing.items()}
    length = struct.Struct("<Q").pack

    class Writer(gguf.GGUFWriter):
        def _pack_val(self, val: Any, vtype: Any, add_vtype: bool, sub_type: Any = None) -> bytes:
            if (vtype != t.ARRAY or self.endianess != gguf.GGUFEndian.LITTLE or not isinstance(val, Sequence)
                    or not val or (sub_type not in numbers and sub_type != t.STRING)):
                return super()._pack_val(val, vtype, add_vtype, sub_type)
            head = struct.pack("<IIQ", vtype, sub_type, len(val)) if add_vtype else struct.pack("<IQ", sub_type,
                                                                                                len(val))
            if sub_type == t.STRING:
                items = [v.encode("utf-8") if isinstance(v, str) else v for v in val]
                return head + b"".join(length(len(b)) + b for b in items)
            return head + np.asarray(val, dtype=numbers[sub_type]).tobytes()

    return Writer


def to_f16(arr: Any) -> Any:
    """Return the float32 array ``arr`` as float16, rounded to nearest even as numpy's ``astype`` rounds, bit for
    bit (a test holds them equal), through torch: its conversion is vectorized and threaded, numpy's a scalar loop
    (about 3 of the 4 seconds an F16 export of Gemma 3 270M took)."""
    import torch

    return torch.from_numpy(arr).to(torch.float16).numpy()


def quantize_gguf(src: Path, out: Path, kind: Literal["q4_k_m"], threads: int | None = None) -> None:
    """Quantize the GGUF ``src`` into ``out`` with llama.cpp's quantizer (``llama_model_quantize``)."""
    import llama_cpp

    ftypes = {"q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftypes[kind]
    params.nthread = threads or 0  # 0: the machine's cores
    # llama.cpp logs a line per tensor (and a warning per fallback type) through llama-cpp-python's logger
    log = logging.getLogger("llama-cpp-python")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
    finally:
        log.setLevel(level)
    if rc != 0 or not out.is_file():
        raise ArenaError(f"export to GGUF: llama.cpp could not quantize {src} to {kind} (code {rc}); export with "
                         "quantize: f16 instead")
