"""The transformers engine: batched generation through the ledger, content identity, the bundled GGUF converted once."""

from __future__ import annotations

import json

import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.base import Request
from arena_learning.engines.calls import CallStats, run_requests
from arena_learning.engines.transformers_engine import TransformersEngine, resolve_hf_folder
from arena_learning.errors import EngineError
from arena_learning.store import Store

from .test_flywheel_export import make_tiny


def spec(model, **kw) -> ModelSpec:
    base = {"name": "student", "engine": "transformers", "model": str(model), "mode": "chat",
            "params": {"max_tokens": 6, "temperature": 0.0}, "batch_size": 4}
    return ModelSpec.model_validate({**base, **kw})


def requests(n: int) -> list[Request]:
    return [Request(messages=[{"role": "user", "content": f"What is {i} + {i}?"}]) for i in range(n)]


@pytest.fixture
def tiny_folder(tmp_path):
    return make_tiny(tmp_path / "model")


def test_unknown_model_paths_are_clear_errors(tmp_path):
    with pytest.raises(EngineError, match="not found"):
        resolve_hf_folder(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngineError, match="no config.json"):
        resolve_hf_folder(str(tmp_path / "empty"))


def test_batched_answers_through_the_ledger(tmp_path, tiny_folder, monkeypatch):
    engine = build_engine(spec(tiny_folder))
    assert isinstance(engine, TransformersEngine)
    sizes = []
    real = engine.generate_batch
    monkeypatch.setattr(engine, "generate_batch", lambda reqs: sizes.append(len(reqs)) or real(reqs))
    with Store(tmp_path / "ws") as store:
        stats = CallStats()
        out = run_requests(store, engine, requests(10), stats=stats, show_progress=False)
        assert len(out) == 10
        assert stats.sent == 10 and sum(sizes) == 10 and max(sizes) == 4  # batches of up to batch_size
        again = CallStats()
        run_requests(store, engine, requests(10), stats=again, show_progress=False)
        assert again.sent == 0 and again.cached == 10
        row = store.db.execute("SELECT engine, model, request FROM calls LIMIT 1").fetchone()
    assert row[0] == "transformers" and row[1].startswith("model@sha256:")
    assert json.loads(row[2])["params"]["dtype"] == "float32"


def test_batched_and_single_greedy_answers_agree(tiny_folder):
    engine = build_engine(spec(tiny_folder, params={"max_tokens": 5}))
    reqs = requests(3)
    batch = engine.generate_batch(reqs)
    single = [engine.generate_batch([r])[0] for r in reqs]
    assert [c.text for c in batch] == [c.text for c in single]
    assert all(c.tokens_in > 0 and c.finish_reason in ("stop", "length") for c in batch)


def test_seeded_samples_batch_and_repeat_whatever_runs_beside_them(tiny_folder):
    engine = build_engine(spec(tiny_folder, params={"max_tokens": 6}))
    reqs = [Request(messages=r.messages, params={"temperature": 1.0, "seed": 7}) for r in requests(4)]
    other = [Request(messages=r.messages, params={"temperature": 1.0, "seed": 8}) for r in requests(4)]
    assert engine._batch_limit(reqs[0]) == engine.spec.batch_size          # sampled requests batch too
    assert engine._group(reqs[0]) == engine._group(other[0])               # whatever their seeds
    batch = [c.text for c in engine.generate_batch(reqs)]
    single = [engine.generate_batch([r])[0].text for r in reqs]
    mixed = engine.generate_batch([other[0], reqs[2], other[1], reqs[0]])
    assert batch == single and [mixed[3].text, mixed[1].text] == [batch[0], batch[2]]
    assert [c.text for c in engine.generate_batch(other)] != batch              # another seed, other samples
    greedy = [c.text for c in engine.generate_batch(requests(4))]
    assert greedy != batch                                                    # and they are samples


def test_completion_mode_and_raw_prompts(tiny_folder):
    engine = build_engine(spec(tiny_folder, mode="completion", params={"max_tokens": 4, "stop": ["\n"]}))
    text, stops, _ = engine.render(requests(1)[0], None)
    assert text == "Question: What is 0 + 0?\nAnswer:" and stops == ["\n", "Question:"]
    (c,) = engine.generate_batch([Request(prompt="Say hi")])
    assert "\n" not in c.text  # cut at the stop string


def test_a_model_retrained_into_the_same_folder_gets_new_ledger_entries(tmp_path, tiny_folder):
    with Store(tmp_path / "ws") as store:
        first = build_engine(spec(tiny_folder))
        run_requests(store, first, requests(3), show_progress=False)
        make_tiny(tiny_folder, seed=1)  # "retrained": other weights, same folder
        second = build_engine(spec(tiny_folder))
        assert second.model_id != first.model_id
        stats = CallStats()
        run_requests(store, second, requests(3), stats=stats, show_progress=False)
        assert stats.sent == 3 and stats.cached == 0
        assert store.db.execute("SELECT COUNT(DISTINCT model) FROM calls").fetchone()[0] == 2


def test_chat_mode_needs_a_chat_template(tmp_path, tiny_folder):
    cfg = json.loads((tiny_folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (tiny_folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    for extra in tiny_folder.glob("chat_template*"):
        extra.unlink()
    engine = build_engine(spec(tiny_folder))
    with Store(tmp_path / "ws") as store:
        stats = CallStats()
        out = run_requests(store, engine, requests(1), stats=stats, show_progress=False)
    assert out == [None] and "no chat template" in stats.errors[0]


@pytest.mark.slow
def test_bundled_gguf_converts_once_and_answers():
    from arena_learning.engines.transformers_engine import SOURCE_MARK, bundled_hf_folder
    from arena_learning.tasks import check, generate_tasks

    folder = bundled_hf_folder()
    assert bundled_hf_folder() == folder and (folder / SOURCE_MARK).is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    engine = build_engine(spec("bundled", mode="completion", batch_size=9,
                               params={"max_tokens": 12, "stop": ["\n"]}))
    prompts = generate_tasks(9, seed=0)
    out = engine.generate_batch([Request(messages=[{"role": "user", "content": p.turns[0]}]) for p in prompts])
    assert sum(check(p, [c.text]) for p, c in zip(prompts, out)) > 0  # the base model gets some right
    assert all("\n" not in c.text for c in out)
