"""Benchmark: the GGUF export of a flywheel stage, and its read of the template GGUF against gguf's own reader.

Run: ``python benchmarks/bench_gguf_export.py [--record]``

Every flywheel stage served through llama.cpp (``training.serve_as: llamacpp``, the default) is exported to GGUF
with the template's metadata and tokenizer (``engines/gguf_export.py``). The template is the bundled Gemma 3 270M:
262,144 tokens, each with a score and a type. Printed, all in this process:

- the export's template read (``read_template_meta``: ``struct`` over the header, key/values and tensor infos) and
  ``gguf.GGUFReader`` on the same file (the baseline, which makes a numpy view of every array item): seconds, the
  RSS each adds while it is held (the export keeps its template's record for the process's life), and whether
  they give the same values;
- one whole export of the bundled model's Hugging Face folder to an f16 GGUF, as a flywheel process's first export
  runs it (a fresh file in a temporary folder; the template read included), against the same export written as the
  library writes it (the baseline: ``gguf.GGUFWriter`` packing each array item alone, numpy's scalar float16
  conversion), and whether the two files are the same bytes.

The target: the template read in at most 2 s on 2 cores. Exits 1 when it is missed, else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import gguf
from results import emit

from arena_learning.engines import gguf_export
from arena_learning.engines.bundled import bundled_model_path
from arena_learning.engines.registry import file_sha256
from arena_learning.engines.transformers_engine import bundled_hf_folder

TARGET_S = 2.0
COMMAND = "python benchmarks/bench_gguf_export.py"


def rss_mb() -> float:
    """Return this process's resident memory now, in MB."""
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def library_export(folder: Path, template: Path, out: Path) -> float:
    """Return the seconds of the export written as the library writes it: ``gguf.GGUFWriter`` itself and numpy's
    float16 cast in place of the export's writer and conversion (the baseline; put back afterwards)."""
    import numpy as np

    saved = gguf_export.gguf_writer, gguf_export.to_f16
    gguf_export.gguf_writer = lambda: gguf.GGUFWriter  # type: ignore[assignment]
    gguf_export.to_f16 = lambda arr: arr.astype(np.float16)
    try:
        t0 = time.perf_counter()
        gguf_export.write_gguf(folder, template, out, "f16")
        return time.perf_counter() - t0
    finally:
        gguf_export.gguf_writer, gguf_export.to_f16 = saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = ap.parse_args(argv)
    template = str(bundled_model_path())
    folder = bundled_hf_folder()  # made once per machine (the bundled GGUF dequantized): not timed
    before = rss_mb()
    t0 = time.perf_counter()
    meta = gguf_export.read_template_meta(template)
    fast_s = time.perf_counter() - t0
    fast_mb = rss_mb() - before
    before = rss_mb()
    t0 = time.perf_counter()
    reader = gguf.GGUFReader(template)  # held, as the export held it before (one per process)
    lib_s = time.perf_counter() - t0
    lib_mb = rss_mb() - before
    del reader
    same = meta == gguf_export._library_meta(template)  # the library's values in the record's shape: not timed
    n_tokens = len(meta.get("tokenizer.ggml.tokens") or ())
    print(f"template {Path(template).name}: {len(meta.fields)} key/values ({n_tokens:,} tokens), "
          f"{len(meta.tensors)} tensors")
    print(f"  read_template_meta {fast_s:6.2f} s  +{fast_mb:5.0f} MB RSS")
    print(f"  gguf.GGUFReader    {lib_s:6.2f} s  +{lib_mb:5.0f} MB RSS (the baseline)")
    print(f"  x{lib_s / fast_s:.1f} faster, the same values: {same}")
    gguf_export.read_hf_tensors(folder)  # torch imported and the weights in the page cache for both: not timed
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        gguf_export.write_gguf(folder, Path(template), Path(tmp) / "m.gguf", "f16")
        export_s = time.perf_counter() - t0
        size_mb = (Path(tmp) / "m.gguf").stat().st_size / 1e6
        base_s = library_export(folder, Path(template), Path(tmp) / "base.gguf")
        same_bytes = file_sha256(Path(tmp) / "m.gguf") == file_sha256(Path(tmp) / "base.gguf")
    print(f"export of {folder.name} to f16 GGUF: {export_s:.2f} s ({size_mb:.0f} MB); as the library writes it "
          f"{base_s:.2f} s (the baseline): x{base_s / export_s:.1f}, the same bytes: {same_bytes}")
    note = (f"bundled Gemma 3 270M template, {n_tokens:,} tokens: {fast_s:.2f} s and +{fast_mb:.0f} MB RSS against "
            f"gguf.GGUFReader's {lib_s:.2f} s and +{lib_mb:.0f} MB in the same process; same values: {same}")
    emit("gguf_export.template_read_s", fast_s, "s", "lower", COMMAND, note, record_it=args.record)
    emit("gguf_export.template_read_speedup", lib_s / fast_s, "x", "higher", COMMAND, note, record_it=args.record)
    export_note = (f"the bundled model's HF folder to an f16 GGUF ({size_mb:.0f} MB), the template read included: "
                   f"{export_s:.2f} s against {base_s:.2f} s written as the library writes it (gguf.GGUFWriter, "
                   f"numpy's float16 cast) in the same process; the same bytes: {same_bytes}")
    emit("gguf_export.export_f16_s", export_s, "s", "lower", COMMAND, export_note, record_it=args.record)
    emit("gguf_export.export_f16_speedup", base_s / export_s, "x", "higher", COMMAND, export_note,
         record_it=args.record)
    if not same:
        print("the two readers disagree: a bug in read_template_meta")
        return 1
    if not same_bytes:
        print("the export and the library's writing of it differ: a bug in gguf_writer or to_f16")
        return 1
    if fast_s > TARGET_S:
        print(f"missed: the template read took {fast_s:.2f} s (target {TARGET_S} s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
