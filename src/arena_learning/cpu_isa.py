"""Training and transformers answers that do not depend on the CPU's instruction set.

torch picks its CPU kernels when it starts: ATen's vectorised kernels for the widest vectors the CPU has
(AVX-512 here, AVX2 on many machines), MKL's BLAS likewise, oneDNN too. Wider vectors sum in another order and
round otherwise, so the same flywheel trains other weights on an AVX-512 machine than on an AVX2 one, and the
tables part after a round or two (issue 36: two fresh clones of one commit parted in round 2).

``pin_cpu_isa`` sets each library's own switch to AVX2, which every x86-64 machine this project builds llama.cpp
for has (``engines/llama_build.py`` builds for AVX2 too): ATen's ``ATEN_CPU_CAPABILITY``, MKL's ``MKL_CBWR``
(conditional numerical reproducibility: MKL's promise of the same bits on any CPU with the named instructions)
and oneDNN's ``ONEDNN_MAX_CPU_ISA``. Each is read when its library first computes, so the ``arena`` command pins
them when it starts, before torch ever computes, for itself and the processes it starts; importing the package
changes nothing (a script of a user's calls ``pin_cpu_isa`` itself). A variable the user set is left as set;
``ARENA_CPU_ISA=native`` leaves all of them alone (each machine's fastest kernels, its own tables). What the pin
changes and costs is measured on the results page (``docs/results.md``). Other CPU architectures (ARM) have no such
switches and are left alone.
"""

from __future__ import annotations

import os
import platform

PINNED: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
"""The switches the pin sets (unless the user set them): every library's kernels at AVX2."""

OPT_OUT = "ARENA_CPU_ISA"
"""``ARENA_CPU_ISA=native``: no pin, each library's fastest kernels for this CPU (tables per machine)."""


def pin_cpu_isa(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the AVX2 pin in ``environ`` (default: this process's) where the user has not; return what was set."""
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT, "").lower() == "native" or platform.machine().lower() not in ("x86_64", "amd64"):
        return {}
    added = {k: v for k, v in PINNED.items() if k not in env}
    env.update(added)
    return added


def describe() -> str:
    """Return one line on the kernels torch computes with here (``arena doctor``)."""
    pinned = {k: os.environ.get(k) for k in PINNED}
    if os.environ.get(OPT_OUT, "").lower() == "native":
        return f"native (ARENA_CPU_ISA=native: this CPU's fastest kernels, tables per machine); {pinned}"
    if not any(pinned.values()):
        return "each library's own (no pin in force: not x86-64, or not started by the arena command)"
    return "AVX2 pinned: " + ", ".join(f"{k}={v}" for k, v in pinned.items())
