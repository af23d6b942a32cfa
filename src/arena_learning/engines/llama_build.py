"""Install llama-cpp-python built for any x86-64 machine, not for the CPU it was built on.

``pip install llama-cpp-python`` compiles llama.cpp with ``-march=native``: a build made on a CPU
with AVX-512 or AMX carries those instructions, and dies with ``Illegal instruction`` where the
CPU lacks them or the kernel/sandbox does not grant AMX tile state (seen on a Xeon in a
container: ``tilezero`` in ``libggml-cpu.so``). This script builds it once with explicit,
portable CPU options (AVX2 + FMA + F16C, the x86-64-v3 level every machine of this project's
kind has), keeps the wheel in a folder of ours named by version and options, and installs that
wheel. pip's own wheel cache is never consulted, so a natively built wheel left there by an
earlier ``pip install`` is not reused silently.

Run: ``python -m arena_learning.engines.llama_build`` (or ``make llama``). Standard library only:
the Makefile runs it by path before the package is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

VERSION = "0.3.36"
# Explicit options instead of -march=native; every wide or optional extension is off.
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF "
    "-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF "
    "-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
    "-DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
)
BUILD_TAG = "portable-" + hashlib.sha256(CMAKE_ARGS.encode()).hexdigest()[:10]


def wheel_dir() -> Path:
    """Return the folder that keeps the portable wheel (``$ARENA_WHEEL_CACHE`` or the arena cache)."""
    root = os.environ.get("ARENA_WHEEL_CACHE")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("ARENA_CACHE") or Path.home() / ".cache" / "arena-learning") / "wheels"
    return base / f"llama-cpp-python-{VERSION}-{BUILD_TAG}"


def _pip(python: str, *args: str, env: dict[str, str] | None = None) -> None:
    cmd = [python, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def build(python: str, force: bool = False) -> Path:
    """Build the portable wheel into ``wheel_dir()`` unless it is there; return the folder."""
    folder = wheel_dir()
    if not force and any(folder.glob("llama_cpp_python-*.whl")):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "FORCE_CMAKE": "1"}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    print(f"building llama-cpp-python {VERSION} for any x86-64 CPU with AVX2 (about 5-7 minutes on 2 cores) ...",
          flush=True)
    _pip(python, "wheel", "--no-deps", "--no-cache-dir", "--no-binary", "llama-cpp-python",
         "-w", str(folder), f"llama-cpp-python=={VERSION}", env=env)
    return folder


def install(python: str, force: bool = False) -> None:
    """Build (once) and install the portable llama-cpp-python into ``python``'s environment."""
    folder = build(python, force=force)
    # --no-index: only our wheel is a candidate; its dependencies come from PyPI afterwards.
    _pip(python, "install", "--quiet", "--no-deps", "--force-reinstall", "--no-index", "--find-links", str(folder),
         f"llama-cpp-python=={VERSION}")
    _pip(python, "install", "--quiet", "typing-extensions>=4.5", "numpy>=1.20", "diskcache>=5.6.1", "jinja2>=2.11.3")
    (folder / "installed-by").write_text(python + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose environment gets it")
    parser.add_argument("--rebuild", action="store_true", help="build again even if the wheel is kept")
    parser.add_argument("--print-dir", action="store_true", help="print the wheel folder and exit")
    args = parser.parse_args(argv)
    if args.print_dir:
        print(wheel_dir())
        return 0
    try:
        install(args.python, force=args.rebuild)
    except subprocess.CalledProcessError as err:
        print(f"error: building or installing llama-cpp-python failed ({err}); it needs a C/C++ compiler and cmake",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
