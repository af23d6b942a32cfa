"""The engine registry: one table that config validation, build_engine, the planners and the Ray backend read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arena_learning.config import JudgeConfig, ModelSpec, RunConfig, validate_config
from arena_learning.engine_kinds import ENGINE_KINDS, engine_kind
from arena_learning.engines import build_engine, engine_class
from arena_learning.engines.base import Request
from arena_learning.engines.calls import arun_requests
from arena_learning.engines.imported import ImportedEngine
from arena_learning.errors import ConfigError, EngineError
from arena_learning.store import Store

SRC = Path(__file__).resolve().parents[1] / "src" / "arena_learning"


def test_every_registered_kind_names_its_class_and_the_class_keys_the_ledger_by_that_name():
    # the class's ``kind`` enters every ledger key: a registry name that differed would orphan the ledger
    assert list(ENGINE_KINDS) == ["llamacpp", "openai", "anthropic", "imported", "transformers", "vllm"]
    for name, kind in ENGINE_KINDS.items():
        cls = kind.engine_class()
        assert cls.kind == name, (name, cls)
        spec = ModelSpec(name="m", engine=name, base_url="http://127.0.0.1:1" if name == "openai" else None)
        assert engine_class(spec) is cls


def test_only_the_imported_kind_makes_no_calls_and_only_vllm_loads_its_model_when_built():
    assert [k.name for k in ENGINE_KINDS.values() if not k.makes_calls] == ["imported"]
    assert [k.name for k in ENGINE_KINDS.values() if k.loads_on_build] == ["vllm"]


def test_a_config_naming_an_unknown_engine_lists_the_registered_ones():
    data = {"models": [{"name": "a", "engine": "llamacpp"}, {"name": "b", "engine": "llama.cpp"}]}
    with pytest.raises(ConfigError) as err:
        validate_config(data, RunConfig, "run.yaml")
    msg = str(err.value)
    assert "run.yaml" in msg and "'llama.cpp'" in msg
    assert "llamacpp, openai, anthropic, imported, transformers, vllm" in msg
    with pytest.raises(ConfigError, match="unknown engine 'gguf'"):
        engine_kind("gguf")


def test_the_engine_field_documents_every_registered_kind():
    help_text = ModelSpec.model_fields["engine"].description or ""
    assert help_text.startswith("llamacpp (in-process GGUF), openai (any OpenAI-compatible endpoint), anthropic (")
    assert help_text.endswith(" or vllm (in-process vLLM offline batches; needs a GPU)")
    assert all(f"{k.name} ({k.summary})" in help_text for k in ENGINE_KINDS.values())


def test_local_weights_are_resolved_by_the_kind_and_endpoints_have_none(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert ENGINE_KINDS["llamacpp"].weights_path(str(gguf)) == gguf
    with pytest.raises(EngineError, match="model file not found"):
        ENGINE_KINDS["llamacpp"].weights_path(str(tmp_path / "missing.gguf"))
    (tmp_path / "config.json").write_text("{}")
    assert ENGINE_KINDS["transformers"].weights_path(str(tmp_path)) == tmp_path
    for name in ("openai", "anthropic", "imported", "vllm"):
        assert ENGINE_KINDS[name].weights_path(str(gguf)) is None


def test_an_imported_model_asked_for_an_answer_stops_with_its_name_and_leaves_the_ledger_empty(tmp_path):
    engine = build_engine(ModelSpec(name="gpt-4-0314", engine="imported"))
    assert isinstance(engine, ImportedEngine) and not engine.spec.engine_kind.makes_calls
    with Store(tmp_path / "ws") as store:
        with pytest.raises(EngineError, match="'gpt-4-0314' is imported"):
            asyncio.run(arun_requests(store, engine, [Request(messages=[{"role": "user", "content": "hi"}])]))
        assert store.call_counts() == {}


def test_a_judge_on_an_imported_model_is_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match="judge 'j': its model's engine 'imported' has no model to run"):
        validate_config({"kind": "llm", "name": "j", "model": {"name": "x", "engine": "imported"}}, JudgeConfig,
                        "judge")


def test_no_module_tests_for_the_imported_engine_by_name():
    """The registry says what an engine kind does; nothing else spells ``engine == "imported"``."""
    hits = [f"{p.relative_to(SRC)}:{i}" for p in sorted(SRC.rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if 'engine == "imported"' in line or "engine == 'imported'" in line or 'engine != "imported"' in line]
    # flywheel/rounds.py: its answering moves to pipeline.stage_answer on the fw branch (issue 19 item 2)
    assert [h for h in hits if not h.startswith("flywheel/rounds.py")] == []
