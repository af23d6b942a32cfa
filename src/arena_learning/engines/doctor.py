"""What a bug report needs: the interpreter, OS, CPU, the extras installed, the GPU, the llama.cpp build and whether
it runs, torch and its kernels, the bundled model. On the core install (no extras) every part it cannot see says
which extra would bring it."""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

from ..extras import EXTRAS, dist_version, installed
from .llama_build import BUILD_TAG, wheel_dir
from .llama_check import build_fingerprint, check_llama, cpu_info, library_dir

WIDE_FEATURES = ("AVX512", "AMX", "AVX_VNNI")


def _torch() -> dict[str, Any]:
    from ..cpu_isa import describe

    if importlib.util.find_spec("torch") is None:
        return {"installed": False, "isa_pin": describe(), "error": "not installed (the train extra)"}
    import torch

    return {"installed": True, "version": torch.__version__, "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(), "cuda": bool(torch.cuda.is_available()),
            "cuda_build": torch.version.cuda, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "isa_pin": describe()}


def gpus() -> list[dict[str, Any]]:
    """Return each GPU torch sees (name, memory in GiB, the CUDA build), or, without torch, each one nvidia-smi
    lists; [] where there is none."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return [{"name": torch.cuda.get_device_name(i),
                     "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
                     "cuda_build": torch.version.cuda, "seen_by": "torch"} for i in range(torch.cuda.device_count())]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [line.rsplit(",", 1) for line in out.splitlines() if "," in line]
    return [{"name": name.strip(), "memory_gib": round(float(mib) / 1024, 1), "cuda_build": None,
             "seen_by": "nvidia-smi (torch sees no GPU here)"} for name, mib in rows if mib.strip().isdigit()]


def _bundled() -> dict[str, Any]:
    from ..errors import ArenaError
    from .bundled import bundled_model_path
    from .identity import content_identity

    try:
        path = bundled_model_path()
    except ArenaError as err:
        return {"path": None, "error": str(err)}
    return {"path": str(path), "bytes": path.stat().st_size, "identity": content_identity(path)}


def _models() -> list[dict[str, Any]]:
    # the registry's models: parts installed, assembled, and the assembled file's hash against the registry's
    # (identity's cached digest: a file hashed before costs nothing; `arena models verify` re-hashes)
    from .identity import file_digest
    from .registry import MODELS, status

    out = []
    for model in MODELS.values():
        row = status(model)
        row["verified"] = bool(row["assembled"]) and file_digest(model.path) == model.sha256
        out.append(row)
    return out


def wide_features(system_info: str) -> list[str]:
    """Return the CPU features a llama.cpp build was compiled with beyond the portable AVX2 set."""
    found = []
    for part in system_info.replace("|", " ").split():
        name, _, value = part.partition("=")
        if value.strip() == "1" and any(name.strip().startswith(w) for w in WIDE_FEATURES):
            found.append(name.strip())
    return found


def diagnose() -> dict[str, Any]:
    """Return the whole report (``arena doctor --json``)."""
    from ..errors import ArenaError

    smoke: dict[str, Any]
    if importlib.util.find_spec("llama_cpp") is None:  # the core install: nothing to smoke-test
        smoke = {"ok": None, "skipped": f"llama-cpp-python is not installed ({EXTRAS['local'].pip})",
                 "system_info": ""}
    else:
        try:
            got = check_llama(use_cache=False)
            smoke = {"ok": True, "seconds": got.get("seconds"), "text": got.get("text"),
                     "system_info": got.get("system_info", "")}
        except ArenaError as err:
            smoke = {"ok": False, "error": str(err), "system_info": ""}
    have = installed()
    lib = library_dir()
    portable_wheels = sorted(p.name for p in wheel_dir().glob("*.whl")) if wheel_dir().is_dir() else []
    wide = wide_features(smoke.get("system_info", ""))
    return {
        "python": {"version": sys.version.split()[0], "executable": sys.executable,
                   "implementation": platform.python_implementation()},
        "os": {"platform": platform.platform(), "kernel": platform.release()},
        "cpu": cpu_info(),
        "arena_learning": dist_version("arena-learning"),
        "extras": {name: {"installed": name in have, "versions": have.get(name, {}),
                          "pip": None if name in have else e.pip} for name, e in EXTRAS.items()},
        "gpus": gpus(),
        "llama_cpp": {
            "version": dist_version("llama-cpp-python"),
            "library_dir": str(lib) if lib else None,
            "build_fingerprint": build_fingerprint(),
            "system_info": smoke.get("system_info", ""),
            "wide_features": wide,
            "portable": None if not smoke.get("system_info") else not wide,
            "portable_build_tag": BUILD_TAG,
            "portable_wheel": portable_wheels[0] if portable_wheels else None,
        },
        "smoke_generation": {k: v for k, v in smoke.items() if k != "system_info"},
        "torch": _torch(),
        "bundled_model": _bundled(),
        "models": _models(),
        "env": {k: os.environ[k] for k in ("ARENA_CACHE", "OMP_NUM_THREADS", "HF_HUB_OFFLINE") if k in os.environ},
    }
