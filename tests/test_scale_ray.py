"""The Ray backend on a real local Ray instance: same results as a local run, a killed actor loses nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest
import ray  # in the `all` extra that `make` installs: its absence fails, never skips

from arena_learning import pipeline
from arena_learning.config import RunConfig, load_config_file
from arena_learning.errors import EngineError
from arena_learning.scale import scaled
from arena_learning.store import Store

from .conftest import ARENA, REPO

pytestmark = pytest.mark.slow

QUICKSTART = REPO / "examples" / "formats.yaml"  # three prompt formats of the smallest model
# A judge model through the Ray backend too: the bundled base model cannot judge (most verdicts fail to parse and
# are asked again), but its calls, re-asks included, must be the local run's. Unconstrained and short: a JSON
# grammar makes llama.cpp sample at ~5 tokens/s here.
LLM_JUDGE = [
    "judge.kind=llm", "judge.name=gemma-judge", "judge.template=pairwise", "judge.structured=false",
    "judge.retries=1", "judge.sampling={max_tokens: 24}",
    "judge.model={name: gemma-judge, engine: llamacpp, model: bundled, mode: chat, chat_format: gemma}",
    "audit.allow_self_judging=true",  # the one model here judges its own prompt formats (a warning says so)
]


@pytest.fixture(scope="module")
def cluster():
    """A Ray instance on this machine, as `ray start --head --num-cpus 2` would give."""
    from arena_learning.scale.ray_backend import workers_not_niced

    started = not ray.is_initialized()
    if started:
        with workers_not_niced():  # as the backend starts Ray
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     configure_logging=False)
    yield
    if started:
        ray.shutdown()


def load(overrides: list[str]) -> RunConfig:
    """The quickstart's config with ``overrides``, on its first two prompt formats: one pair of models, so the
    judge (the costly part here) plays two games a prompt."""
    cfg = load_config_file(QUICKSTART, RunConfig, ["ratings.bootstrap=0", *overrides])
    return cfg.model_copy(update={"models": cfg.models[:2]})


def run(ws, overrides):
    """Run the quickstart stages into ``ws``; return (answers, judgments, battles, ledger rows)."""
    cfg = load(overrides)
    with Store(ws) as store, scaled(cfg.scale):
        prompts = pipeline.stage_prompts(cfg, store)
        pipeline.stage_answer(cfg, store, prompts=prompts, show_progress=False)
        pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
    return results(ws, cfg.judge.name)


def results(ws, judge):
    with Store(ws, readonly=True) as store:
        answers = sorted((a.prompt_id, a.model, tuple(a.turns)) for a in store.get_answers())
        judgments = sorted((j.prompt_id, j.model_a, j.model_b, j.raw, j.status) for j in store.get_judgments())
        battles = sorted((b.prompt_id, b.model_a, b.model_b, b.outcome) for b in store.get_battles(judge))
    db = sqlite3.connect(ws / "arena.db")
    try:
        calls = db.execute("SELECT key, status, attempts FROM calls ORDER BY key").fetchall()
    finally:
        db.close()
    return answers, judgments, battles, calls


def test_ray_backend_gives_the_local_run_and_a_killed_actor_neither_loses_nor_repeats_work(tmp_path, cluster):
    """One local run and one through Ray whose first engine actor is killed (SIGKILL) mid-run: the same answers,
    verdicts, battles and ledger keys, every call made once."""
    # 4 prompts: 8 answers in batches of 2, so a kill after 3 calls lands mid-run; the judge re-asks some games
    # (the ledger holds more calls than answers and games)
    overrides = ["tasks.n=4", "tasks.seed=3", *LLM_JUDGE]
    local = run(tmp_path / "local", overrides)
    ws = tmp_path / "ray"
    cfg = load([*overrides, "scale.backend=ray", "scale.batch_size=2", "scale.max_restarts=2"])
    killed: dict = {}

    def killer(backend) -> None:
        deadline = time.time() + 300
        while time.time() < deadline and "pid" not in killed:
            if backend.pools and (ws / "arena.db").exists():
                db = sqlite3.connect(f"file:{ws / 'arena.db'}?mode=ro", uri=True)
                try:
                    done = db.execute("SELECT count(*) FROM calls").fetchone()[0]
                finally:
                    db.close()
                if done >= 3:
                    pool = next(iter(backend.pools.values()))
                    killed["pid"] = pool.pids()[0]
                    killed["niceness"] = os.getpriority(os.PRIO_PROCESS, killed["pid"])
                    killed["done"] = done
                    os.kill(killed["pid"], signal.SIGKILL)
                    killed["new_pid"] = pool.pids()[0]  # waits for the restarted actor
            time.sleep(0.05)

    from arena_learning.scale.ray_backend import ray_backend

    with Store(ws) as store, ray_backend(cfg.scale) as backend:
        thread = threading.Thread(target=killer, args=(backend,), daemon=True)
        thread.start()
        prompts = pipeline.stage_prompts(cfg, store)
        pipeline.stage_answer(cfg, store, prompts=prompts, show_progress=False)
        pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
        thread.join(timeout=60)
    assert "pid" in killed, "the actor was not killed mid-run"
    assert killed["niceness"] == 0  # not Ray's default 15: beside other work, a niced actor crawls
    assert killed["done"] < 4 * 2, "the kill came after the last answer"
    assert killed["new_pid"] != killed["pid"]
    remote = results(ws, cfg.judge.name)
    answers, judgments, _, calls = remote
    assert len(answers) == 4 * 2 and len(judgments) == 4 * 2  # battles: only from verdicts that parsed
    assert len(calls) > 4 * 2 + 4 * 2, calls  # the answers, each game's verdict and re-asks
    assert remote == local  # answers, verdicts, battles and the very ledger keys
    assert all(status == "ok" and attempts == 1 for _, status, attempts in calls)
    # The engine actors are gone with the block: their CPUs are free again.
    deadline = time.time() + 20
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2


def test_an_engine_actor_runs_its_local_model_on_the_cpus_ray_reserved_for_it(cluster):
    """Not on every core of its node (two actors on two cores would run four spinning llama.cpp threads); a spec's own
    n_threads wins."""
    from arena_learning.scale.ray_backend import ray_backend

    cfg = load_config_file(QUICKSTART, RunConfig, ["tasks.n=1", "scale.backend=ray"])
    spec = cfg.models[0]
    assert spec.n_threads is None and cfg.scale.defaults.num_cpus == 1
    with ray_backend(cfg.scale) as backend:
        backend.engine(spec)
        pool = next(iter(backend.pools.values()))
        pool.ensure()
        actor = pool.actors[0]
        assert ray.get(actor.threads_of.remote(spec.model_dump_json())) == 1
        two = spec.model_copy(update={"n_threads": 2})
        assert ray.get(actor.threads_of.remote(two.model_dump_json())) == 2


def test_ray_backend_errors_are_clear(tmp_path, cluster, monkeypatch):
    cfg = load_config_file(QUICKSTART, RunConfig, ["tasks.n=3", "scale.backend=ray",
                                                   "models.gemma-270m-0shot.model=/nonexistent/model.gguf"])
    with (Store(tmp_path / "ws") as store, scaled(cfg.scale),
          pytest.raises(EngineError, match="/nonexistent/model.gguf")):
        pipeline.stage_answer(cfg, store, prompts=pipeline.stage_prompts(cfg, store), show_progress=False)
    # More than the cluster has: an error that says what and what to do, not an actor pending forever.
    cfg = load_config_file(QUICKSTART, RunConfig, ["tasks.n=3", "scale.backend=ray", "scale.defaults.replicas=5"])
    with Store(tmp_path / "ws2") as store, scaled(cfg.scale), \
            pytest.raises(EngineError, match=r"need 5 CPU \(5 replicas\), the Ray cluster has 2 CPU"):
        pipeline.stage_answer(cfg, store, prompts=pipeline.stage_prompts(cfg, store), show_progress=False)
    monkeypatch.setitem(sys.modules, "ray", None)
    from arena_learning.scale.ray_backend import import_ray

    with pytest.raises(EngineError, match=r"pip install 'arena-learning\[ray\]'"):
        import_ray()


def test_flywheel_round_through_ray(tmp_path):
    """`arena flywheel --ray local`: the references, the target and the trained model answer in engine actors."""
    import json
    import subprocess

    import yaml

    from .test_flywheel_rounds import CONFIG

    data = json.loads(json.dumps(CONFIG))
    data["rounds"] = data["rounds"][:1]
    data["training"]["sft"]["max_steps"] = 1
    data["evaluate_base"] = True
    cfg = tmp_path / "fw.yaml"
    cfg.write_text(yaml.safe_dump(data))
    ws = tmp_path / "ws"
    proc = subprocess.run([*ARENA, "flywheel", str(cfg), "-w", str(ws), "--ray", "local", "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = json.loads(proc.stdout)
    assert [r["round"] for r in table["rounds"]] == [0] and table["rounds"][0]["rating"] is not None
    assert table["base"]["rating"] is not None and table["references"][0]["rating"] is not None
    with sqlite3.connect(ws / "arena.db") as db:
        by_engine = dict(db.execute("SELECT engine, COUNT(*) FROM calls GROUP BY engine").fetchall())
        models = {m for (m,) in db.execute("SELECT DISTINCT model FROM calls WHERE engine='transformers'")}
        attempts = {a for (a,) in db.execute("SELECT DISTINCT attempts FROM calls")}
    assert by_engine.get("llamacpp", 0) > 0 and by_engine.get("transformers", 0) > 0
    assert len(models) == 2, models  # the untrained target and the round-1 model (another content, another key)
    assert attempts == {1}


def test_rate_limits_are_shared_out_among_replicas_and_scale_names_are_checked():
    from arena_learning.config import ModelSpec, validate_config
    from arena_learning.errors import ConfigError
    from arena_learning.flywheel.settings import FlywheelConfig
    from arena_learning.scale.ray_backend import actor_spec

    spec = ModelSpec(name="api", engine="openai", model="m", base_url="http://127.0.0.1:1/v1", rpm=600, tpm=90000)
    shared = actor_spec(spec, 4)
    assert (shared.rpm, shared.tpm, shared.concurrency) == (150, 22500, spec.concurrency)
    assert actor_spec(spec, 1) is spec
    from .test_flywheel_rounds import CONFIG

    with pytest.raises(ConfigError, match="scale.models names nobody"):
        validate_config({**CONFIG, "scale": {"backend": "ray", "models": {"nobody": {"replicas": 2}}}}, FlywheelConfig)


def test_an_api_key_never_reaches_the_workspace_or_rays_logs(tmp_path):
    """An openai model with api_key_env through `arena run --ray local`: authenticated calls, and the key is in
    none of the workspace's files, the output, or the files of the Ray session the run started."""
    import glob
    import hashlib
    import subprocess

    from .conftest import write_config
    from .test_faults import serve

    secret = "sk-ray-" + hashlib.sha1(str(tmp_path).encode()).hexdigest()
    srv = serve(None, api_key=secret)
    before = set(glob.glob("/tmp/ray/session_2*"))
    try:
        cfg = write_config(tmp_path / "c.yaml", f"""
name: secret
tasks: {{n: 6}}
models:
  - {{name: a, engine: openai, model: m, base_url: "{srv.url}", api_key_env: ARENA_RAY_SECRET,
      params: {{max_tokens: 8}}}}
  - {{name: b, engine: openai, model: m, revision: r2, base_url: "{srv.url}", api_key_env: ARENA_RAY_SECRET,
      params: {{max_tokens: 9}}}}
ratings: {{bootstrap: 5}}
""")
        ws = tmp_path / "ws"
        proc = subprocess.run([*ARENA, "run", str(cfg), "-w", str(ws), "--ray", "local"], capture_output=True,
                              text=True, env={**os.environ, "ARENA_RAY_SECRET": secret}, timeout=600)
    finally:
        srv.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    with sqlite3.connect(ws / "arena.db") as db:
        assert db.execute("SELECT COUNT(*) FROM calls WHERE status='ok'").fetchone()[0] == 12
    assert secret not in proc.stdout + proc.stderr
    sessions = set(glob.glob("/tmp/ray/session_2*")) - before
    files = [p for d in [ws, *map(Path, sessions)] for p in Path(d).rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "arena.db" for p in files) and any("raylet" in p.name for p in files)
    for p in files:
        try:
            data = p.read_bytes()
        except OSError:  # sockets and files Ray removed meanwhile
            continue
        assert secret.encode() not in data, p


def test_what_the_cluster_reports_goes_to_stderr_not_into_the_json_on_stdout(capsys):
    """Ray prints its cluster's error channel (a task retried after its worker died) to stdout; `arena flywheel
    --ray local --json` once failed to parse because such a line came before the result."""
    from ray._private import worker

    from arena_learning.scale.ray_backend import cluster_messages_to_stderr

    cluster_messages_to_stderr()
    cluster_messages_to_stderr()  # replaced once, however often a run connects
    line = "Task EngineHost.complete_batch failed. There are infinite retries remaining, so the task will be retried."
    worker.print_to_stdstream({"lines": [line], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == "" and err.count("complete_batch failed") == 1
