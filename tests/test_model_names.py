"""Models named as users name them: a Hugging Face repo id (and file) and an Ollama tag, resolved from a hub cache
and an Ollama store each test lays out from local files (the real bundled GGUF, linked, never copied), offline."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine, registry
from arena_learning.engines.base import Request
from arena_learning.engines.bundled import BUNDLED_NAME, resolve_model_path
from arena_learning.engines.calls import request_key
from arena_learning.engines.model_names import HubName, OllamaName, describe, locate, parse
from arena_learning.errors import EngineError
from arena_learning.extras import MissingExtra

from .conftest import arena

GEMMA = registry.MODELS["gemma-3-270m"]
COMMIT = "c0ffee" + "0" * 34  # a snapshot's commit hash
PUBLISHED = GEMMA.published[0]  # unsloth/gemma-3-270m-GGUF, gemma-3-270m-Q4_K_M.gguf


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.stat().st_size < 1 << 24 else registry.file_sha256(
        path)


def _link(src: Path, dst: Path) -> None:
    """Put ``src`` at ``dst`` without copying its bytes: a hard link, or a symbolic one across file systems."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        dst.symlink_to(src.resolve())


def lay_out_hub_repo(cache: Path, repo: str, files: dict[str, Path], commit: str = COMMIT,
                     ref: str | None = "main", blob_names: dict[str, str] | None = None) -> Path:
    """Lay out ``repo`` at ``commit`` in a Hugging Face hub cache as ``hf download`` leaves it: each file's bytes in
    ``blobs/<sha256>``, ``snapshots/<commit>/<path>`` linking to it, ``refs/<ref>`` holding the commit."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    for rel, src in files.items():
        blob = folder / "blobs" / (blob_names or {}).get(rel, _sha256(src))
        if not blob.exists():
            _link(src, blob)
        snap = folder / "snapshots" / commit / rel
        snap.parent.mkdir(parents=True, exist_ok=True)
        snap.symlink_to(os.path.relpath(blob, snap.parent))
    if ref is not None:
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return folder / "snapshots" / commit


def lay_out_ollama_model(store: Path, name: str, tag: str, gguf: Path, host: str = "registry.ollama.ai",
                         namespace: str = "library", extra_layers: tuple[dict, ...] = ()) -> Path:
    """Lay out ``name:tag`` in an Ollama store as ``ollama pull`` leaves it: a manifest and the GGUF as a blob."""
    digest = _sha256(gguf)
    blob = store / "blobs" / f"sha256-{digest}"
    if not blob.exists():
        _link(gguf, blob)
    manifest = store / "manifests" / host / namespace / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "1" * 64,
                   "size": 2},
        "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                    "size": gguf.stat().st_size}, *extra_layers]}))
    return blob


@pytest.fixture(scope="module")
def gemma() -> Path:
    """The real bundled GGUF, assembled (once) in the machine's arena cache."""
    return registry.model_path("gemma-3-270m").resolve()


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty hub cache in ``tmp_path``, read offline: the environment a fresh process reads, and the library's
    settings of this process (read once, when huggingface_hub was first imported)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path / "arena-cache"))  # the links to registered files go here
    return cache


@pytest.fixture
def ollama_store(tmp_path, monkeypatch):
    store = tmp_path / "ollama"
    store.mkdir()
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    monkeypatch.setenv("ARENA_CACHE", str(tmp_path / "arena-cache"))
    return store


def small_file(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def test_each_form_of_a_name_reads_as_its_source(tmp_path, monkeypatch):
    hub, ollama = HubName, OllamaName
    assert parse("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M") == hub(
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", quant="Q4_K_M")
    assert parse("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf") == hub(
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    assert parse("org/name@v1.0/sub/f.gguf") == hub("org/name", "v1.0", "sub/f.gguf")
    assert parse(f"org/name@{COMMIT}:q8_0") == hub("org/name", COMMIT, quant="q8_0")
    assert parse("Qwen/Qwen2.5-0.5B-Instruct") == hub("Qwen/Qwen2.5-0.5B-Instruct")
    assert parse("hf:gpt2") == parse("hf://gpt2") == hub("gpt2")
    assert parse("qwen2.5-coder:1.5b") == ollama("registry.ollama.ai", "library", "qwen2.5-coder", "1.5b")
    assert parse("library/qwen2.5-coder:1.5b") == parse("registry.ollama.ai/library/qwen2.5-coder:1.5b") == ollama(
        "registry.ollama.ai", "library", "qwen2.5-coder", "1.5b")
    assert parse("library/llama3") == parse("ollama:llama3") == ollama("registry.ollama.ai", "library", "llama3",
                                                                        "latest")
    assert parse("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M") == ollama(
        "hf.co", "bartowski", "Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
    assert parse("ollama:mannix/llama3:8b") == ollama("registry.ollama.ai", "mannix", "llama3", "8b")
    # paths: what starts like one, a 'dir/file.gguf', a bare word, and any path that exists, whatever it looks like
    for text in ("./org/name", "/abs/x.gguf", "~/m.gguf", "runs/model.gguf", "nope", "bundled-copy"):
        assert parse(text) == Path(text).expanduser()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    (tmp_path / "qwen2.5-coder:1.5b").write_text("x")
    assert parse("Qwen/Qwen2.5-0.5B-Instruct") == Path("Qwen/Qwen2.5-0.5B-Instruct")
    assert parse("qwen2.5-coder:1.5b") == Path("qwen2.5-coder:1.5b")


def answer(model: str) -> tuple[str, str]:
    """Return the llamacpp engine's answer to one prompt for ``model`` and the call's ledger key."""
    engine = build_engine(ModelSpec(name="m", engine="llamacpp", model=model, mode="completion", n_threads=2,
                                    parallel=1, params={"max_tokens": 6, "stop": ["\n"]}))
    ask = Request(messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert engine.model_id == "gemma3-270m-q4_k_m.gguf@sha256:a5fd3b62230aa5ec"
    return engine.complete_sync(ask).text, request_key(engine, ask)


@pytest.mark.slow  # answers with the bundled model through llama.cpp
def test_a_model_named_by_its_hub_repo_and_file_answers_offline_as_the_registered_file(offline_hub, gemma):
    lay_out_hub_repo(offline_hub, PUBLISHED.repo, {PUBLISHED.file: gemma})
    by_file = resolve_model_path(f"{PUBLISHED.repo}/{PUBLISHED.file}")
    by_quant = resolve_model_path(f"{PUBLISHED.repo}:q4_k_m")  # llama-server -hf's form, any case
    # the registry's bytes: shown under the registry's file name, so the ledger keys are the registered file's
    assert by_file == by_quant and by_file.name == BUNDLED_NAME and os.path.samefile(by_file, gemma)

    text, key = answer(f"{PUBLISHED.repo}:Q4_K_M")
    assert text.strip() and (text, key) == answer("bundled")  # the same answer, under the same ledger key


@pytest.mark.slow  # answers with the bundled model through llama.cpp
def test_a_model_named_by_its_ollama_tag_answers_from_the_store_without_ollama(ollama_store, gemma):
    lay_out_ollama_model(ollama_store, "gemma3", "270m-q4", gemma)
    names = ["gemma3:270m-q4", "library/gemma3:270m-q4", "registry.ollama.ai/library/gemma3:270m-q4",
             "ollama:gemma3:270m-q4"]
    paths = {resolve_model_path(n) for n in names}
    assert len(paths) == 1 and next(iter(paths)).resolve() == (ollama_store / "blobs" / f"sha256-{GEMMA.sha256}"
                                                               ).resolve()
    text, key = answer("gemma3:270m-q4")
    assert text.strip() and (text, key) == answer("bundled")  # the registered file's answer and ledger key


def test_a_tag_that_is_no_registered_model_is_its_blob_under_the_tags_name(ollama_store, tmp_path):
    gguf = small_file(tmp_path / "src", "m.gguf", "GGUF not a registered model")
    blob = lay_out_ollama_model(ollama_store, "tiny", "1b", gguf, host="hf.co", namespace="someone")
    path = resolve_model_path("hf.co/someone/tiny:1b")
    assert path.name == "tiny-1b.gguf" and path.resolve() == blob.resolve()
    assert describe("hf.co/someone/tiny:1b")["ledger_name"] == f"tiny-1b.gguf@sha256:{_sha256(gguf)[:16]}"


def test_ollama_store_errors_say_what_where_and_what_to_do(ollama_store, tmp_path):
    gguf = small_file(tmp_path / "src", "m.gguf", "GGUF bytes")
    blob = lay_out_ollama_model(ollama_store, "tiny", "1b", gguf)
    with pytest.raises(EngineError, match=r"'tiny:2b' is not in the Ollama store .*ollama.*no manifest .*manifests/"
                                          r"registry\.ollama\.ai/library/tiny/2b.*has tiny as 1b.*ollama pull tiny:2b.*"
                                          r"OLLAMA_MODELS"):
        resolve_model_path("tiny:2b")
    blob.unlink()
    blob.write_text("GGUF bytez")  # the same size, other bytes: only the digest can tell
    with pytest.raises(EngineError, match=r"tiny:1b.*has sha256 [0-9a-f]{64}, not the [0-9a-f]{64}.*damaged.*"
                                          r"ollama pull tiny:1b"):
        resolve_model_path("tiny:1b")
    adapter = {"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:" + "2" * 64, "size": 1}
    lay_out_ollama_model(ollama_store, "tuned", "1b", small_file(tmp_path / "src", "t.gguf", "GGUF t"),
                         extra_layers=(adapter,))
    with pytest.raises(EngineError, match=r"'tuned:1b' is a GGUF with an adapter"):
        resolve_model_path("tuned:1b")


def test_hub_repo_quant_revision_and_file_choose_the_cached_file(offline_hub, tmp_path):
    src = tmp_path / "src"
    files = {"m-Q4_K_M.gguf": small_file(src, "a", "GGUF q4"), "m-Q8_0.gguf": small_file(src, "b", "GGUF q8"),
             "mmproj-m-Q4_K_M.gguf": small_file(src, "c", "GGUF vision projector"),
             "README.md": small_file(src, "d", "# m")}
    main = lay_out_hub_repo(offline_hub, "org/m-GGUF", files)
    old = lay_out_hub_repo(offline_hub, "org/m-GGUF", {"m-Q4_K_M.gguf": small_file(src, "e", "GGUF q4, v0")},
                           commit="0" * 40, ref=None)
    assert resolve_model_path("org/m-GGUF:q8_0") == main / "m-Q8_0.gguf"
    assert resolve_model_path("org/m-GGUF") == main / "m-Q4_K_M.gguf"  # several GGUFs: Q4_K_M, as llama.cpp picks
    assert resolve_model_path("org/m-GGUF/m-Q4_K_M.gguf") == main / "m-Q4_K_M.gguf"
    assert resolve_model_path(f"org/m-GGUF@{'0' * 40}/m-Q4_K_M.gguf") == old / "m-Q4_K_M.gguf"  # pinned
    assert resolve_model_path(f"org/m-GGUF@{'0' * 40}:Q4_K_M").read_text() == "GGUF q4, v0"
    with pytest.raises(EngineError, match=r"no GGUF files of org/m-GGUF match 'Q2_K' \(its GGUF files: m-Q4_K_M\.gguf, "
                                          r"m-Q8_0\.gguf\).*model: org/m-GGUF/FILE"):
        resolve_model_path("org/m-GGUF:Q2_K")
    with pytest.raises(EngineError, match=r"org/m-GGUF/m-Q6_K\.gguf.*the file of org/m-GGUF at revision main is not in "
                                          r"the Hugging Face cache .*hub and offline \(HF_HUB_OFFLINE is set\).*"
                                          r"hf download org/m-GGUF m-Q6_K\.gguf"):
        resolve_model_path("org/m-GGUF/m-Q6_K.gguf")
    with pytest.raises(EngineError, match=r"'org/absent:Q4_K_M'.*the file list of org/absent at revision main is not "
                                          r"in the Hugging Face cache.*offline"):
        resolve_model_path("org/absent:Q4_K_M")


def test_a_damaged_hub_blob_and_a_changed_registered_file_are_refused(offline_hub, tmp_path):
    src = tmp_path / "src"
    lay_out_hub_repo(offline_hub, "org/m-GGUF", {"m.gguf": small_file(src, "a", "GGUF")},
                     blob_names={"m.gguf": "f" * 64})  # a blob whose bytes are not the SHA-256 it is named by
    with pytest.raises(EngineError, match=r"m\.gguf is damaged in the Hugging Face cache \(sha256 [0-9a-f]{64}, its "
                                          r"blob says f{64}\).*--force-download"):
        resolve_model_path("org/m-GGUF/m.gguf")
    other = src / "same-size.gguf"
    with open(other, "wb") as fh:  # the registered file's size, other bytes (sparse: no disk used)
        fh.truncate(GEMMA.size)
    lay_out_hub_repo(offline_hub, PUBLISHED.repo, {PUBLISHED.file: other})
    with pytest.raises(EngineError, match=rf"{PUBLISHED.file} in the Hugging Face cache .* has the size of registered "
                                          rf"model 'gemma-3-270m' but sha256 [0-9a-f]{{64}}, not the registry's "
                                          rf"{GEMMA.sha256}.*--force-download"):
        resolve_model_path(f"{PUBLISHED.repo}/{PUBLISHED.file}")


def test_without_huggingface_hub_a_repo_id_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as on the core install: the import fails
    with pytest.raises(MissingExtra, match=r"'org/m-GGUF:Q4_K_M' \(a Hugging Face repo id; or give the model's "
                                           r"path\) needs the 'local' extra \(huggingface_hub not installed\): "
                                           r"pip install 'arena-learning\[local\]'"):
        resolve_model_path("org/m-GGUF:Q4_K_M")


@pytest.mark.slow  # builds and runs a tiny transformers model
def test_a_transformers_model_named_by_its_repo_id_answers_from_its_snapshot(offline_hub, tmp_path):
    from arena_learning.engines.transformers_engine import resolve_hf_folder

    from .test_flywheel_export import make_tiny

    folder = make_tiny(tmp_path / "tiny")
    snapshot = lay_out_hub_repo(offline_hub, "arena-test/tiny", {p.name: p for p in folder.iterdir() if p.is_file()})
    got = resolve_hf_folder("arena-test/tiny")
    assert got.name == "tiny" and got.resolve() == snapshot
    spec = {"name": "t", "engine": "transformers", "mode": "chat", "params": {"max_tokens": 4, "temperature": 0.0}}
    by_name = build_engine(ModelSpec.model_validate({**spec, "model": "arena-test/tiny"}))
    by_path = build_engine(ModelSpec.model_validate({**spec, "model": str(folder)}))
    ask = Request(messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert by_name.model_id == by_path.model_id  # the same content under the same name: the same ledger keys
    got, want = by_name.generate_batch([ask])[0], by_path.generate_batch([ask])[0]
    assert got.tokens_out >= 1 and got.text == want.text
    with pytest.raises(EngineError, match=r"arena-test/other.*model folder of arena-test/other at revision main is not "
                                          r"in the Hugging Face cache"):
        resolve_hf_folder("arena-test/other")


def test_arena_models_shows_sources_and_a_fresh_process_reads_the_hub_and_ollama_environment(tmp_path, gemma):
    got = arena("models", "--json")
    assert got.returncode == 0, got.stderr
    rows = {r["name"]: r for r in json.loads(got.stdout)}
    qwen = rows["qwen2.5-coder-1.5b-instruct"]
    assert qwen["license"] == "Apache-2.0" and qwen["source"].startswith("PyPI: 22 parts")
    repo, file = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert qwen["published"] == [{"repo": repo, "file": file, "revision": "main", "model": f"{repo}/{file}",
                                  "url": f"https://huggingface.co/{repo}/blob/main/{file}"}]
    lay_out_hub_repo(tmp_path / "hf" / "hub", PUBLISHED.repo, {PUBLISHED.file: gemma})
    lay_out_ollama_model(tmp_path / "ollama", "gemma3", "270m-q4", gemma)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "OLLAMA_MODELS":
           str(tmp_path / "ollama"), "ARENA_CACHE": str(tmp_path / "arena-cache")}
    env.pop("HF_HUB_CACHE", None)
    proc = subprocess.run([sys.executable, "-m", "arena_learning", "models", "show", "--json",
                           f"{PUBLISHED.repo}:Q4_K_M", "gemma3:270m-q4"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    hub, ollama = json.loads(proc.stdout)
    assert hub["source"] == f"Hugging Face hub cache: {PUBLISHED.repo} at main"
    assert ollama["source"] == f"Ollama store {tmp_path / 'ollama'}: gemma3:270m-q4"
    for row in (hub, ollama):
        assert row["registered"] == "gemma-3-270m" and row["license"] == GEMMA.license
        assert row["bytes"] == GEMMA.size and row["sha256"] == GEMMA.sha256 and os.path.samefile(row["file"], gemma)
        assert row["ledger_name"] == "gemma3-270m-q4_k_m.gguf@sha256:a5fd3b62230aa5ec"
    proc = subprocess.run([sys.executable, "-m", "arena_learning", "models", "show", "gemma3:1b"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "'gemma3:1b' is not in the Ollama store" in proc.stderr
    assert "ollama pull gemma3:1b" in proc.stderr and "Traceback" not in proc.stderr


def test_locate_never_downloads_when_told_not_to(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online, but asked for the cache alone
    with pytest.raises(EngineError, match=r"not in the Hugging Face cache"):
        locate("org/never-downloaded", folder=True, download=False)


def test_a_revision_key_on_a_local_model_is_an_error_that_says_where_the_revision_goes():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"model 'm': revision labels an endpoint's weights.*model: "
                                              r"ORG/NAME@REVISION/FILE\.gguf"):
        ModelSpec(name="m", engine="llamacpp", model="org/m-GGUF:Q4_K_M", revision="v1")
    assert ModelSpec(name="m", engine="openai", model="org/m", base_url="http://127.0.0.1:1/v1", revision="v1")
