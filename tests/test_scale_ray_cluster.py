"""The Ray backend on a cluster of several nodes (Ray's own ``ray.cluster_utils.Cluster``: a head and a worker node on
this machine, each its own raylet): a model's engine actors land on both nodes; a worker node removed in the middle of
the battle stage, and a driver killed and started again against the same cluster, lose nothing, pay no finished call
twice, and end with the board of a local run."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from arena_learning import pipeline
from arena_learning.scale.ray_backend import ray_backend, workers_not_niced
from arena_learning.store import Store

from .conftest import ARENA
from .test_scale_ray import load, results, run

pytestmark = pytest.mark.slow  # a two-node Ray cluster and three runs of four prompts: a few minutes on two cores

# four prompts, two prompt formats of the bundled model; the judge is the same weights answering in arena-hard's
# labels from four examples, so its verdicts parse and the battles make a board (one actor pool for all three, two
# replicas of half a CPU each, one on each node); a batch is one call, so the games spread over both replicas
FEW_SHOT = [["Which answer is better? A: Paris. B: Lyon. The question: the capital of France.", "[[A>>B]]"],
            ["Which answer is better? A: 4. B: 5. The question: 2 + 2.", "[[A>B]]"],
            ["Which answer is better? A: blue. B: blue. The question: the colour of the sky.", "[[A=B]]"],
            ["Which answer is better? A: 3. B: 12. The question: 3 x 4.", "[[B>>A]]"]]
JUDGE = ["judge.kind=llm", "judge.name=fs-judge", "judge.template=arena-hard", "judge.structured=false",
         "judge.retries=0", "judge.sampling={max_tokens: 12}", "audit.canaries=false",
         "audit.allow_self_judging=true",
         "judge.model={name: fs-judge, engine: llamacpp, model: bundled, mode: completion, n_ctx: 4096, "
         'params: {max_tokens: 12, stop: ["\\n"]}, ' f"prompt_format: {{few_shot: {FEW_SHOT}}}}}"]
OVERRIDES = ["tasks.n=4", "tasks.seed=5", *JUDGE]
RAY = ["scale.backend=ray", "scale.batch_size=1", "scale.max_restarts=3", "scale.defaults.replicas=2",
       "scale.defaults.num_cpus=0.5"]


@pytest.fixture(scope="module")
def cluster():
    """A head node and a worker node of one CPU each, this process connected as the driver."""
    if ray.is_initialized():
        ray.shutdown()
    with workers_not_niced():
        # every node on 127.0.0.1: the cluster's traffic stays on loopback
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                           "node_ip_address": "127.0.0.1"})
        worker = c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    assert c.address.startswith("127.0.0.1:")
    ray.init(address=c.address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    yield c, worker
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def local(module_tmp):
    """The same stages in this process, no Ray: what every Ray run must end with (its results, its board)."""
    ws = module_tmp / "local"
    return run(ws, OVERRIDES), _board(ws)


def _ledger_rows(ws: Path) -> int:
    if not (ws / "arena.db").exists():
        return 0
    db = sqlite3.connect(f"file:{ws / 'arena.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT count(*) FROM calls WHERE status = 'ok'").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is being made
        return 0
    finally:
        db.close()


def _board(ws: Path) -> list[tuple[str, float, float, float]]:
    cfg = load(OVERRIDES)
    with Store(ws, readonly=True) as store:
        return [(r.model, r.rating, r.ci_low, r.ci_high) for r in pipeline.stage_ratings(cfg, store)]


def test_a_worker_node_removed_mid_battle_stage_loses_nothing_and_repeats_nothing(tmp_path, cluster, local):
    c, worker = cluster
    local, board = local
    cfg = load([*OVERRIDES, *RAY, f"scale.address={c.address}"])
    ws = tmp_path / "ray"
    seen: dict = {}

    def remove_the_worker(backend, answers: int) -> None:
        deadline = time.time() + 600
        while time.time() < deadline:
            if _ledger_rows(ws) >= answers + 2:  # two of the judge's games are in: the stage is under way
                pool = next(iter(backend.pools.values()))
                seen["nodes_before"] = set(pool.nodes())
                seen["done"] = _ledger_rows(ws)
                c.remove_node(worker, allow_graceful=False)
                # the cluster marks the node dead when its heartbeats stop; its actor restarts on the head
                while time.time() < deadline:
                    seen["nodes_after"] = set(pool.nodes())
                    if worker.node_id not in seen["nodes_after"]:
                        return
                    time.sleep(0.5)
                return
            time.sleep(0.05)

    with Store(ws) as store, ray_backend(cfg.scale) as backend:
        prompts = pipeline.stage_prompts(cfg, store)
        pipeline.stage_answer(cfg, store, prompts=prompts, show_progress=False)
        answers = _ledger_rows(ws)
        thread = threading.Thread(target=remove_the_worker, args=(backend, answers), daemon=True)
        thread.start()
        pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
        thread.join(timeout=300)
    assert len(seen.get("nodes_before", ())) == 2, seen  # the replicas were on both nodes
    assert seen["done"] < len(local[3]), "the node went after the stage's last call"
    assert seen["nodes_after"] == {c.head_node.node_id}, seen  # both replicas now on the head
    remote = results(ws, cfg.judge.name)
    assert remote == local  # the same answers, verdicts, battles and ledger keys: nothing lost
    calls = remote[3]
    assert all(status == "ok" and attempts == 1 for _, status, attempts in calls)  # none failed, none asked twice
    assert len(calls) == len({key for key, _, _ in calls})  # one row a call
    assert _board(ws) == board


def test_a_driver_killed_mid_battle_stage_resumes_against_the_same_cluster(tmp_path, cluster, local):
    import yaml

    c, _ = cluster
    local, board = local
    cfg_path = tmp_path / "arena.yaml"
    cfg = load([*OVERRIDES, *RAY, f"scale.address={c.address}"])
    cfg_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")
    ws = tmp_path / "ws"
    first = subprocess.run([*ARENA, "answer", str(cfg_path), "-w", str(ws)], capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    answers = _ledger_rows(ws)
    proc = subprocess.Popen([*ARENA, "battle", str(cfg_path), "-w", str(ws)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while _ledger_rows(ws) < answers + 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the battle stage ended before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    done = _ledger_rows(ws)
    assert done < len(local[3])
    again = subprocess.run([*ARENA, "battle", str(cfg_path), "-w", str(ws)], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    remote = results(ws, cfg.judge.name)
    assert remote == local
    assert all(status == "ok" and attempts == 1 for _, status, attempts in remote[3])
    assert _board(ws) == board
