"""Does the installed llama.cpp library run on this CPU? Checked once, in a subprocess.

A llama.cpp build made for another CPU (``-march=native`` on a machine with AVX-512 or AMX)
dies with ``Illegal instruction`` at its first matrix product, taking the whole process with it:
a run loses its progress bar mid-line, pytest loses every test after it. Before the first
in-process generation we run a probe in a child process: load the bundled model, evaluate a
prompt (the batched path) and generate a few tokens (the single-token path). A signal in the
child becomes an ``EngineError`` that says what happened and the one command that rebuilds the
library. A success is cached per installed build (the library files' names, sizes and times),
interpreter and CPU, so the probe costs about a second once, and nothing afterwards.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import EngineError
from .bundled import cache_dir

if TYPE_CHECKING:
    from llama_cpp.llama_types import CreateCompletionResponse

REBUILD = "python -m arena_learning.engines.llama_build --rebuild"
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16")
PROBE_TIMEOUT_S = 300.0

_lock = threading.Lock()
_passed = False
_failure: str | None = None  # a probe that died in this process: later calls fail at once with its message


def cpu_info() -> dict[str, Any]:
    """Return the CPU model and which SIMD/AMX flags the kernel reports (Linux /proc/cpuinfo; elsewhere the
    platform's processor name and no flags).

    The one reader of /proc/cpuinfo: the llama.cpp check, ``arena doctor``, the speed records and the
    results log (``benchmarks/results.py``) all name the machine by it. The first processor's model
    name and flags are taken.
    """
    model = ""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip() and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return {"model": model, "machine": platform.machine(), "cores": os.cpu_count(),
            "flags": [f for f in SIMD_FLAGS if f in flags]}


def library_dir() -> Path | None:
    """Return the folder of the installed ``llama_cpp`` package, without importing it."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def build_fingerprint() -> str:
    """Return a key for (installed llama.cpp files, interpreter, CPU): a new build or machine is checked anew."""
    h = hashlib.sha256()
    lib = library_dir()
    h.update(f"{lib}|{sys.executable}|{json.dumps(cpu_info(), sort_keys=True)}".encode())
    if lib is not None:
        for path in sorted(lib.rglob("*")):
            if path.suffix in {".so", ".dylib", ".dll", ".py"} or ".so." in path.name:
                st = path.stat()
                h.update(f"{path.relative_to(lib)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _cache_file(fingerprint: str) -> Path:
    return cache_dir() / "llama-check" / f"{fingerprint}.json"


def _probe_command(model_path: str) -> list[str]:
    return [sys.executable, "-m", "arena_learning.engines.llama_check", "--probe", model_path]


def describe_death(returncode: int) -> str:
    """Return the name of the signal that killed a child (``-4`` -> SIGILL, Illegal instruction)."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"signal {-returncode}"
    extra = {signal.SIGILL: " (Illegal instruction)", signal.SIGSEGV: " (Segmentation fault)",
             signal.SIGBUS: " (Bus error)", signal.SIGKILL: " (killed; out of memory?)"}.get(sig, "")
    return f"{sig.name}{extra}"


def run_probe(command: list[str] | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run the probe in a child process; return its report, or ``{"ok": False, "error": ...}``."""
    if command is None:
        from .bundled import bundled_model_path

        command = _probe_command(str(bundled_model_path()))
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONFAULTHANDLER": "0"})
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"the probe did not finish within {timeout_s:.0f} s"}
    seconds = round(time.perf_counter() - start, 2)
    if proc.returncode == 0:
        try:
            report = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"ok": False, "error": f"the probe printed no report: {proc.stdout[-300:]!r} {proc.stderr[-300:]!r}"}
        return {**report, "ok": True, "seconds": seconds}
    tail = " ".join(proc.stderr.strip().splitlines()[-3:])[-400:]
    return {"ok": False, "returncode": proc.returncode, "seconds": seconds,
            "error": f"the llama.cpp library died with {describe_death(proc.returncode)} while generating a token"
                     + (f"; its last words: {tail}" if tail else "")}


def failure_message(report: dict[str, Any]) -> str:
    lib = library_dir()
    return (f"{report['error']}. The installed llama-cpp-python ({lib or 'not found'}) does not run on this CPU "
            f"({cpu_info()['model']}); it was probably compiled for another machine (-march=native, AVX-512/AMX). "
            f"Rebuild it for any x86-64 CPU with one command: `{REBUILD}` (or `make llama` in a checkout), "
            "then run again; `arena doctor` prints the details for a bug report")


def check_llama(command: list[str] | None = None, *, use_cache: bool = True) -> dict[str, Any]:
    """Make sure the installed llama.cpp generates on this CPU; raise EngineError if it dies.

    Runs once per process (then free) and once per installed build (a success is cached on disk).
    ``command`` replaces the probe's command line (tests simulate a crash with it).
    """
    global _passed, _failure
    with _lock:
        if command is None and _passed:
            return {"ok": True, "cached": True}
        if command is None and _failure is not None:
            raise EngineError(_failure)
        fingerprint = build_fingerprint()
        cached = _cache_file(fingerprint)
        if use_cache and command is None and cached.is_file():
            try:
                report = json.loads(cached.read_text())
                if report.get("ok"):
                    _passed = True
                    return {**report, "cached": True}
            except ValueError:
                pass
        report = run_probe(command)
        if not report["ok"]:
            message = failure_message(report)
            if command is None:
                _failure = message
            raise EngineError(message)
        if command is None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({**report, "fingerprint": fingerprint}))
            os.replace(tmp, cached)
            _passed = True
        return {**report, "cached": False}


def _probe(model_path: str) -> int:
    """The child's side: load the model, evaluate a prompt, generate; print a JSON report."""
    import llama_cpp
    from llama_cpp import Llama

    info = llama_cpp.llama_print_system_info()
    info = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    llm = Llama(model_path=model_path, n_ctx=256, n_threads=min(2, os.cpu_count() or 1), verbose=False)
    prompt = "Question: What is the capital of France?\nAnswer: Paris\n\nQuestion: What is 2 + 3?\nAnswer:"
    # stream=False (the default): one response, not the iterator of the union type
    out = cast("CreateCompletionResponse", llm.create_completion(prompt=prompt, max_tokens=4, temperature=0.0, seed=0))
    llm.close()
    print(json.dumps({"system_info": info.strip(), "llama_cpp_version": getattr(llama_cpp, "__version__", "?"),
                      "text": out["choices"][0]["text"], "tokens": out["usage"]["completion_tokens"]}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        sys.exit(_probe(sys.argv[2]))
    print(json.dumps(check_llama(use_cache="--no-cache" not in sys.argv)))
