"""arena plan's minutes (engines.speed): the batcher's costs replayed, rates measured and kept per machine, training
and harvest records, and a plan that times a real model's calls."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from arena_learning.config import ModelSpec, RunConfig, load_config_file
from arena_learning.engines import speed
from arena_learning.engines.llama_batcher import PROMPT_CHUNK
from arena_learning.engines.speed import Job, Rates, Slots, chunks_between, predict

REPO = Path(__file__).resolve().parents[1]


def rates(**kw) -> Rates:
    base = dict(arch="gemma3", ftype=15, size_bytes=1000, threads=2, parallel=8, chunk_s=0.01, token_s=0.001,
                step_s=0.05, call_s=0.0, load_s=0.5, model="m")
    return Rates(**{**base, **kw})


def test_chunks_end_at_multiples_of_the_chunk():
    c = PROMPT_CHUNK
    assert chunks_between(0, 0) == 0
    assert chunks_between(0, 1) == 1
    assert chunks_between(0, c) == 1
    assert chunks_between(0, c + 1) == 2
    assert chunks_between(c, c + 5) == 1
    assert chunks_between(c - 1, c + 1) == 2  # one token to finish the first chunk, one in the next
    assert chunks_between(2 * c, 2 * c) == 0


def test_slots_reuse_whole_chunks_of_a_held_prefix_and_forget_the_oldest():
    c = PROMPT_CHUNK
    shots = list(range(1000, 1000 + 2 * c + 5))  # a shared prefix of two whole chunks and 5 tokens
    first, second = [*shots, 1, 2, 3], [*shots, 7, 8]
    slots = Slots(size=2)
    assert slots.evaluate(first) == (3, len(first))  # nothing held: every chunk
    assert slots.evaluate(second) == (1, len(second) - 2 * c)  # the two whole chunks are reused, the 5 are not
    other = list(range(5000, 5000 + 3 * c))
    assert slots.evaluate(other) == (3, 3 * c)
    # a prompt that is a held one exactly still evaluates its last token (the logits come from it)
    assert slots.evaluate(list(other)) == (1, c)
    # two newer prompts pushed the shots out of the two slots
    assert slots.evaluate([*shots, 9]) == (3, len(shots) + 1)


def test_predict_adds_chunks_steps_calls_and_nothing_for_no_jobs():
    r = rates(chunk_s=0.01, token_s=0.001, step_s=0.05, call_s=0.002, parallel=2)
    assert predict(r, [], Slots(2)) == 0.0
    jobs = [Job(tokens=[1] * 40, n_tokens=40, out=4.0), Job(tokens=None, n_tokens=10, out=2.0)]
    # chunks: 40 tokens -> 2, the unknown 10 -> 1; two jobs fit the two slots: max(out) steps
    want = 3 * 0.01 + 50 * 0.001 + 2 * 0.002 + 4 * 0.05
    assert predict(r, jobs, Slots(2)) == pytest.approx(want)
    many = [Job(tokens=None, n_tokens=1, out=3.0)] * 6  # 18 tokens over 2 slots: 9 steps, plus a last wave's 3
    assert predict(r, many, Slots(2)) == pytest.approx(6 * (0.01 + 0.001 + 0.002) + (9 + 3) * 0.05)


def test_fit_recovers_a_line_and_never_goes_negative():
    pts = [(n, 0.02 + 0.003 * n) for n in (1, 5, 17, 32, 32, 9)]
    sums = [0.0] * 5
    for n, t in pts:
        for k, v in enumerate((1, n, n * n, t, n * t)):
            sums[k] += v
    a, b = speed._fit(sums)
    assert a == pytest.approx(0.02) and b == pytest.approx(0.003)
    assert speed._fit([0, 0, 0, 0, 0]) == (0.0, 0.0)
    a, b = speed._fit([2, 64, 2048, 0.1, 3.2])  # one chunk size only: the fit cannot split it
    assert a >= 0 and b >= 0


def test_rates_file_round_trip_tolerance_and_a_kept_load_time(tmp_path, monkeypatch):
    path = tmp_path / "rates.json"
    monkeypatch.setenv("ARENA_RATES", str(path))
    assert speed.rates_path() == path
    assert speed.load_table() == {"version": speed.VERSION, "machines": {}, "outputs": {}}
    speed.save_rates(rates(size_bytes=1000, load_s=0.7), {"m|sig": (4.5, 48)})
    speed.save_rates(rates(size_bytes=1050, load_s=0.0, step_s=0.06), {})  # the same shape (5%): replaces it
    table = speed.load_table()
    (got,) = [Rates(**r) for r in table["machines"][speed.machine_id()]]
    assert got.step_s == 0.06 and got.load_s == 0.7  # measured on a loaded model: the first load's time stands
    assert table["outputs"] == {"m|sig": [4.5, 48]}
    speed.save_rates(rates(size_bytes=2000, parallel=16), {})  # another parallel: kept beside it
    assert len(speed.load_table()["machines"][speed.machine_id()]) == 2
    path.write_text("{not json")
    assert speed.load_table()["machines"] == {}  # a broken file is an empty one (and the next save rewrites it)


def test_training_exports_and_yields_are_recorded_and_read(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENA_RATES", str(tmp_path / "rates.json"))
    assert speed.training_rates(speed.load_table(), "k") is None
    speed.record_training("k", steps=6, seconds=33.5, s_per_step=2.2)
    speed.record_training("k", steps=22, seconds=65.7, s_per_step=2.3)
    speed.record_training("k", steps=0, seconds=10.0, s_per_step=None)  # nothing trained: not a record
    fixed, per_step = speed.training_rates(speed.load_table(), "k")
    assert per_step == pytest.approx(2.25) and fixed == pytest.approx(((33.5 - 13.2) + (65.7 - 50.6)) / 2)
    speed.record_yield("y", 20, 120)
    speed.record_yield("y", 25, 200)
    assert speed.harvest_yield(speed.load_table(), "y") == pytest.approx(45 / 320)
    assert speed.harvest_yield(speed.load_table(), "other") is None
    speed.record_export("e", 8.0)
    speed.record_export("e", 10.0)
    assert speed.export_seconds(speed.load_table(), "e") == pytest.approx(9.0)
    table = json.loads((tmp_path / "rates.json").read_text())
    assert set(table) >= {"training", "yields", "exports", "machines", "outputs"}


def test_training_key_ignores_what_does_not_cost():
    from arena_learning.flywheel.settings import SFTSettings
    from arena_learning.scale.launch import LaunchSettings

    a = SFTSettings(learning_rate=1e-4, epochs=1, batch_size=8, micro_batch_size=8, max_length=64)
    b = a.model_copy(update={"learning_rate": 5e-5, "epochs": 3, "seed": 7})
    c = a.model_copy(update={"max_length": 128})
    launch = LaunchSettings()
    assert speed.training_key("bundled", "sft", a, launch) == speed.training_key("bundled", "sft", b, launch)
    assert speed.training_key("bundled", "sft", a, launch) != speed.training_key("bundled", "sft", c, launch)
    assert speed.training_key("bundled", "sft", a, launch) != speed.training_key("bundled", "dpo", a, launch)


@pytest.mark.slow
def test_the_replayed_prefix_rule_counts_the_chunks_the_batcher_evaluates(tmp_path, monkeypatch):
    """The plan's replay of a prompt list gives exactly the prompt chunks and tokens the real batcher evaluates
    (few-shot prompts that share a prefix, and zero-shot ones that share less than a chunk), and its decode steps
    come within a quarter of the batcher's."""
    from arena_learning.arena.answers import turn_requests
    from arena_learning.engines import build_engine
    from arena_learning.engines.llamacpp import load_batcher
    from arena_learning.tasks import generate_tasks

    monkeypatch.setenv("ARENA_RATES", str(tmp_path / "rates.json"))
    cfg = load_config_file(REPO / "examples" / "quickstart.yaml", RunConfig)
    prompts = generate_tasks(20, seed=3, suite=2)
    for spec in cfg.models[:2]:  # gemma 0-shot and 12-shot
        spec = spec.model_copy(update={"n_threads": 1, "parallel": 4, "n_ctx": 1024})
        engine = build_engine(spec)
        batcher = load_batcher(spec)
        requests = [r for p in prompts for r in turn_requests(spec, p, [], 0)]
        before = (batcher.prefill_steps, batcher.prefill_tokens, batcher.decode_steps)
        outs = asyncio.run(speed._complete_all(engine, requests))
        steps = batcher.prefill_steps - before[0], batcher.prefill_tokens - before[1]
        decode_steps = batcher.decode_steps - before[2]
        slots = Slots(spec.parallel)
        replay = [slots.evaluate(engine._job(r).tokens) for r in requests]
        assert (sum(c for c, _ in replay), sum(n for _, n in replay)) == steps, spec.name
        mean_out = sum(c.tokens_out for c in outs) / len(outs)
        r = rates(parallel=spec.parallel, chunk_s=0.0, token_s=0.0, call_s=0.0, step_s=1.0)
        planned = predict(r, [Job(tokens=[1], n_tokens=1, out=mean_out)] * len(requests), Slots(spec.parallel))
        assert abs(planned - decode_steps) <= 0.25 * decode_steps, (spec.name, planned, decode_steps)


@pytest.mark.slow
def test_a_plan_times_a_measured_model_and_says_which_it_cannot(tmp_path, monkeypatch):
    """arena plan --measure records the model's rates; the plan then times its calls (the calls the ledger holds
    cost nothing), and a model without rates is named, not guessed."""
    from arena_learning.plan import measure_models, plan_run
    from arena_learning.tasks import generate_tasks

    monkeypatch.setenv("ARENA_RATES", str(tmp_path / "rates.json"))
    cfg = load_config_file(REPO / "examples" / "quickstart.yaml", RunConfig)
    small = [m.model_copy(update={"n_threads": 1, "parallel": 4}) for m in cfg.models[:2]]
    cfg = cfg.model_copy(update={"models": small, "tasks": cfg.tasks.model_copy(update={"n": 12})})
    untimed = plan_run(cfg, None, timed=True)
    assert all(x.seconds is None and "arena plan --measure" in x.timing for x in untimed.lines if x.step == "answer")
    assert untimed.minutes()["untimed"] == 24
    assert any("not timed (no rates measured here): gemma-270m-0shot, gemma-270m-12shot" in n for n in untimed.notes)
    said: list[str] = []
    prompts = generate_tasks(12, seed=0, suite=2)
    assert measure_models(small, prompts, say=said.append, n=12) == 2
    assert any("decode step of 4 rows" in s for s in said)
    assert measure_models(small, prompts, say=said.append, n=12) == 0  # measured already: not again
    plan = plan_run(cfg, None, timed=True)
    answers = [x for x in plan.lines if x.step == "answer"]
    assert all(x.seconds is not None and x.seconds > 0 for x in answers)
    assert all("tokens written a call (the measurement)" in x.timing for x in answers)
    assert plan.minutes()["untimed"] == 0 and plan.minutes()["answer"] == pytest.approx(
        sum(x.seconds for x in answers) / 60, abs=0.01)
    # Without the rates a plan is not timed; with them, a line whose calls the ledger holds costs nothing.
    line = answers[0]
    assert line.to_send == 12 and line.as_dict()["seconds"] == round(line.seconds, 1)


def test_the_signature_follows_prompt_settings_not_names():
    a = ModelSpec(name="a", engine="llamacpp", model="bundled", mode="completion")
    assert speed.signature(a) == speed.signature(a.model_copy(update={"name": "b"}))
    shots = a.prompt_format.model_copy(update={"few_shot": [("q", "a")]})
    assert speed.signature(a) != speed.signature(a.model_copy(update={"prompt_format": shots}))


@pytest.mark.slow
def test_the_minutes_benchmark_sets_a_plan_beside_its_run(tmp_path):
    """benchmarks/bench_plan_minutes.py reads a plan made before a run and the run's own seconds per model (the
    workspace's answer_stats, which every answering stage now records); its verdict is a timing, not asserted."""
    import subprocess
    import sys

    import yaml

    from .conftest import arena

    cfg = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    cfg["tasks"]["n"] = 12
    cfg["models"] = [{**m, "n_threads": 1, "parallel": 4} for m in cfg["models"][:2]]
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ws = tmp_path / "ws"
    plan = arena("plan", path, "-w", ws, "--json", "--measure", cwd=REPO)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "[plan] measuring gemma-270m-0shot" in plan.stderr
    (tmp_path / "plan.json").write_text(plan.stdout)
    assert json.loads(plan.stdout)["totals"]["minutes"]["untimed"] == 0
    run = arena("run", path, "-w", ws, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    out = subprocess.run([sys.executable, "benchmarks/bench_plan_minutes.py", str(path), "--from-run", str(ws),
                          "--plan-json", str(tmp_path / "plan.json")], capture_output=True, text=True, cwd=REPO)
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: more than 25% off (a busy machine)
    assert "gemma-270m-0shot" in out.stdout and "gemma-270m-12shot" in out.stdout and "in all" in out.stdout
    assert 'FIGURE {"figure": "plan minutes off (small)"' in out.stdout
    # the run's seconds per model are in its workspace
    from arena_learning.store import Store

    with Store(ws, readonly=True) as store:
        stats = store.get_meta("answer_stats")
    assert all(s["seconds"] > 0 for s in stats.values())
