"""Benchmark: the core install against the full one, each into a fresh virtual environment, in the same run.

Run: ``python benchmarks/bench_install.py [--record]`` (from the repository root, after ``make``: its pip cache and
the portable llama.cpp wheel are what both installs take, so neither downloads nor compiles much).

The wheel is built from the tree once. **core**: ``pip install arena_learning-*.whl`` with constraints.txt, what a
user rating endpoint models types. **full** (the baseline: what every install was before the extras): the portable
llama-cpp-python wheel ``make`` built, then ``arena_learning-*.whl[all]`` with the same constraints. Printed for
each: seconds to install, bytes on disk (the whole venv, pip included), ``arena --help``'s median of 5 runs; and,
read from the full venv's installed files, what each extra adds on top of the core (its distributions' files,
those the core already has not counted twice). Goals (exit 1 when one is missed): the core at most 400 MB, at most
90 s, ``arena --help`` at most 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from arena_learning.engines.llama_build import wheel_dir  # noqa: E402
from arena_learning.extras import EXTRAS  # noqa: E402

COMMAND = "python benchmarks/bench_install.py"
GOALS = {"core_mb": 400.0, "core_install_s": 90.0, "core_help_s": 0.3}


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _venv(where: Path, *packages: str) -> tuple[float, int]:
    """Create a venv at ``where``, pip install ``packages`` into it; return (seconds, bytes on disk)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    env = {**os.environ, "PIP_CONSTRAINT": str(ROOT / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    start = time.perf_counter()
    for group in packages:
        subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", *group.split()],
                       check=True, env=env)
    return time.perf_counter() - start, _du(where)


def _help_s(where: Path, runs: int = 5) -> float:
    subprocess.run([str(where / "bin" / "arena"), "--help"], check=True, capture_output=True)  # files read once
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([str(where / "bin" / "arena"), "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _dists(site: Path) -> dict[str, metadata.Distribution]:
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site)])}


def _closure(dists: dict[str, metadata.Distribution], name: str, extras: set[str]) -> set[str]:
    """Return the distributions ``name[extras]`` brings in the installed set ``dists`` (itself included)."""
    seen: set[str] = set()
    todo = [(canonicalize_name(name), frozenset(extras))]
    while todo:
        dist_name, wanted = todo.pop()
        key = dist_name + "[" + ",".join(sorted(wanted)) + "]"
        if key in seen or dist_name not in dists:
            continue
        seen.add(key)
        for line in dists[dist_name].requires or []:
            req = Requirement(line)
            envs = [{**default_environment(), "extra": e} for e in ("", *wanted)]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {k.split("[")[0] for k in seen}


def _size(dists: dict[str, metadata.Distribution], names: set[str]) -> int:
    total = 0
    for name in names:
        for f in dists[name].files or []:
            path = Path(str(f.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = ap.parse_args(argv)
    llama = sorted(wheel_dir().glob("llama_cpp_python-*.whl"))
    if not llama:
        print(f"no portable llama.cpp wheel in {wheel_dir()}: run `make` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "-o", str(tmp / "dist"), str(ROOT)],
                       check=True, capture_output=True)
        wheel = next((tmp / "dist").glob("arena_learning-*.whl"))
        core_s, core_b = _venv(tmp / "core", str(wheel))
        core_help = _help_s(tmp / "core")
        full_s, full_b = _venv(tmp / "full", str(llama[-1]), f"{wheel}[all]")
        full_help = _help_s(tmp / "full")
        site = next((tmp / "full").glob("lib/python*/site-packages"))
        dists = _dists(site)
        core = _closure(dists, "arena-learning", set())
        extra_mb = {name: _size(dists, _closure(dists, "arena-learning", {name}) - core) / 1e6
                    for name in EXTRAS if name != "vllm"}
    print(f"core: {core_s:.1f} s to install, {core_b / 1e6:,.0f} MB, arena --help {core_help:.3f} s (median of 5)")
    print(f"full (baseline, [all]): {full_s:.1f} s to install, {full_b / 1e6:,.0f} MB, arena --help {full_help:.3f} s")
    print(f"ratios: disk x{full_b / core_b:.1f}, install time x{full_s / core_s:.1f}, "
          f"--help x{full_help / core_help:.1f}")
    for name, mb in extra_mb.items():
        print(f"  extra {name}: +{mb:,.0f} MB on the core")
    note = (f"fresh venvs from pip's cache with constraints.txt; core {core_b / 1e6:.0f} MB in {core_s:.0f} s, "
            f"--help {core_help:.3f} s; full ([all] with the portable llama.cpp wheel) {full_b / 1e6:.0f} MB in "
            f"{full_s:.0f} s, --help {full_help:.3f} s; extras on the core: "
            + ", ".join(f"{n} +{mb:.0f} MB" for n, mb in extra_mb.items()))
    emit("install.core_mb", core_b / 1e6, "MB", "lower", COMMAND, note, record_it=args.record)
    emit("install.core_install_s", core_s, "s", "lower", COMMAND, note, record_it=args.record)
    emit("install.core_help_s", core_help, "s", "lower", COMMAND, note, record_it=args.record)
    emit("install.full_mb", full_b / 1e6, "MB", "lower", COMMAND, note, record_it=args.record)
    emit("install.full_help_s", full_help, "s", "lower", COMMAND, note, record_it=args.record)
    for name, mb in extra_mb.items():
        emit(f"install.extra_{name}_mb", mb, "MB", "lower", COMMAND, note, record_it=args.record)
    got = {"core_mb": core_b / 1e6, "core_install_s": core_s, "core_help_s": core_help}
    missed = [f"{k} {got[k]:.2f} > {goal}" for k, goal in GOALS.items() if got[k] > goal]
    for line in missed:
        print(f"goal missed: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
