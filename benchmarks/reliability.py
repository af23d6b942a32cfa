"""Reliability: faults survived, kills survived, load carried. One table; exit 1 if anything was lost or duplicated.

Everything is the real program (`arena run` as a subprocess, SQLite ledger, the openai engine with
its retries) against `arena serve`'s HTTP app with its fault middleware on 127.0.0.1. The model
behind that server is a stand-in that answers at once (contestant answers, and pairwise verdicts
whose scores come from a hash of the request), so the figures measure the arena, not a model.

1. Faults: 3 contestants answer 334 prompts and an LLM judge plays every pair in both orders
   (1,002 answers + 2,004 judge calls) while the server injects 30% faults of every kind.
   Lost = calls neither answered nor reported failed; then the faults stop and a rerun must give
   the battles of a clean run, asking only what had failed.
2. Kills: the same run, SIGKILLed at 10 seeded random moments; after each kill
   `PRAGMA integrity_check` must say ok, and the next run must not ask the server again for a
   call the ledger already held as a success (duplicated). The last run finishes; its battles
   must equal the clean run's.
3. Load: 10,000 judge calls at concurrency 256 through the engine and ledger: calls/s, peak
   memory growth, file descriptors and asyncio tasks left behind.

    python benchmarks/reliability.py [--prompts 334] [--kills 10] [--load 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import random
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARENA = [sys.executable, "-m", "arena_learning"]


# ---- the stand-in model behind the server (run in its own process) -----------------------

def _stand_in():
    from arena_learning.config import ModelSpec
    from arena_learning.engines.base import Completion, Engine, Request

    class StandIn(Engine):
        kind = "stand-in"

        async def complete(self, request: Request) -> Completion:
            text = json.dumps(request.messages or request.prompt, sort_keys=True)
            h = hashlib.sha256(text.encode()).digest()
            if "json_schema" in request.params:  # a judge call: a verdict
                out = json.dumps({"explanation": "stand-in verdict", "score_a": 1 + h[0] % 10,
                                  "score_b": 1 + h[1] % 10})
            else:
                out = "answer " + h.hex()[:12]
            return Completion(text=out, tokens_in=len(text) // 4, tokens_out=8, finish_reason="stop")

    return StandIn(ModelSpec(name="m", engine="imported"))


def serve(port: int, faults: str, log: str) -> None:
    """Serve the stand-in with faults; append every request's key and outcome to ``log`` (one line each)."""
    from aiohttp import web

    from arena_learning.engines.faults import FaultSpec, install_faults
    from arena_learning.engines.server import make_app

    app = make_app(["m", "jm"], _stand_in())  # the contestants model m, the judge jm
    if faults:
        install_faults(app, FaultSpec.parse(faults))
    fh = open(log, "a", buffering=1)

    @web.middleware
    async def record(req: web.Request, handler):
        body = await req.read()
        resp = await handler(req)
        if req.path.startswith("/v1/"):
            key = hashlib.sha256(body).hexdigest()[:16]
            whole = isinstance(resp, web.Response) and resp.status == 200 and resp.body is not None
            if whole:
                try:
                    data = json.loads(resp.body)
                    choice = data["choices"][0]
                    whole = bool((choice.get("message") or {}).get("content") or choice.get("text"))
                except (ValueError, KeyError, IndexError, TypeError):
                    whole = False
            fh.write(f"{key} {'ok' if whole else 'fault'}\n")
        return resp

    app.middlewares.insert(0, record)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, faults: str, log: Path):
        self.port = free_port()
        self.log = log
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), faults, str(log)])
        deadline = time.time() + 30
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise SystemExit("the stand-in server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def served(log: Path) -> list[tuple[str, ...]]:
    if not log.exists():
        return []
    return [tuple(line.split()) for line in log.read_text().splitlines() if line.strip()]


# ---- the run -----------------------------------------------------------------------------

def write_config(folder: Path, url: str, prompts: int) -> Path:
    data = folder / "prompts.jsonl"
    with open(data, "w") as fh:
        for i in range(prompts):
            turn = f"Question number {i}: explain topic {i * 7 % 97}."
            fh.write(json.dumps({"question_id": f"q{i}", "turns": [turn]}) + "\n")
    models = "\n".join(
        f"  - {{name: c{k}, engine: openai, model: m, base_url: '{url}', concurrency: 16, timeout_s: 2, "
        f"max_retries: 6, empty_replies: fail, params: {{max_tokens: {16 + k}, temperature: 0.0}}}}"  # a flaky endpoint
        for k in range(3))
    cfg = folder / "run.yaml"
    cfg.write_text(f"""name: reliability
prompts: {{path: {data}}}
models:
{models}
judge:
  kind: llm
  name: judge
  template: pairwise
  model: {{name: judge, engine: openai, model: jm, base_url: '{url}', concurrency: 32, timeout_s: 2, max_retries: 6}}
ratings: {{bootstrap: 0}}
""")
    return cfg


def run(cfg: Path, ws: Path, url: str, *, kill_after: float | None = None) -> tuple[int, float]:
    text = cfg.read_text()
    cfg.write_text("\n".join(
        line if "base_url:" not in line else line.split("base_url: '")[0] + f"base_url: '{url}'" + line.split("'", 2)[2]
        for line in text.splitlines()) + "\n")
    start = time.perf_counter()
    proc = subprocess.Popen([*ARENA, "run", str(cfg), "-w", str(ws), "--json"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.returncode, time.perf_counter() - start


def state(ws: Path) -> dict:
    db = sqlite3.connect(ws / "arena.db")
    try:
        ok = {r[0] for r in db.execute("SELECT key FROM calls WHERE status='ok'")}
        counts = dict(db.execute("SELECT status, COUNT(*) FROM calls GROUP BY status").fetchall())
        battles = sorted(db.execute("SELECT prompt_id, model_a, model_b, data FROM battles").fetchall())
        judgments = dict(db.execute("SELECT status, COUNT(*) FROM judgments GROUP BY status").fetchall())
        answers = db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    return {"ok_keys": ok, "counts": counts, "battles": battles, "judgments": judgments, "answers": answers,
            "integrity": integrity}


def accounted(ws: Path, models: int, prompts: int) -> int:
    """Return how many answers and judge games are neither stored nor reported failed (must be 0)."""
    db = sqlite3.connect(ws / "arena.db")
    try:
        have = {(p, m) for p, m in db.execute("SELECT prompt_id, model FROM answers WHERE set_name='test'")}
        stats = json.loads(db.execute("SELECT value FROM meta WHERE key='answer_stats'").fetchone()[0])
        games = db.execute("SELECT COUNT(*) FROM judgments WHERE set_name='test' AND judge='judge'").fetchone()[0]
    finally:
        db.close()
    incomplete = sum(s["incomplete"] for s in stats.values())
    names = [f"c{k}" for k in range(models)]
    possible = sum(2 for i, a in enumerate(names) for b in names[i + 1:] for q in range(prompts)
                   if (f"q{q}", a) in have and (f"q{q}", b) in have)
    return max(0, models * prompts - len(have) - incomplete) + max(0, possible - games)


def faults_part(tmp: Path, prompts: int) -> dict:
    expected_answers, expected_games = 3 * prompts, 3 * 2 * prompts
    clean_srv = Server("", tmp / "clean.log")
    cfg = write_config(tmp, clean_srv.url, prompts)
    run(cfg, tmp / "clean", clean_srv.url)
    clean_srv.stop()
    clean = state(tmp / "clean")

    srv = Server("all=0.3;seed=7;retry_after=0.01;slow_s=0.05;timeout_s=3", tmp / "faulty.log")
    rc, seconds = run(cfg, tmp / "ws", srv.url)
    srv.stop()
    first = state(tmp / "ws")
    log = served(tmp / "faulty.log")
    injected = sum(1 for _, outcome in log if outcome == "fault")  # replies that were not a whole answer
    # every call is present: answered (or judged), or reported failed with its reason
    lost = accounted(tmp / "ws", 3, prompts) if rc == 0 else expected_answers + expected_games
    present = first["counts"].get("ok", 0) + first["counts"].get("error", 0)
    needed = expected_answers + expected_games
    calm = Server("", tmp / "calm.log")
    run(cfg, tmp / "ws", calm.url)
    calm.stop()
    final = state(tmp / "ws")
    asked_again = len(served(tmp / "calm.log"))
    duplicated = max(0, asked_again - first["counts"].get("error", 0) - (needed - present))
    same = final["battles"] == clean["battles"]
    return {"part": "faults 30%", "calls": needed, "faults": injected, "retries": max(0, len(log) - present),
            "failed": first["counts"].get("error", 0), "lost": lost + (0 if same else 1),
            "duplicated": duplicated, "seconds": seconds,
            "note": f"rerun asked {asked_again}, battles equal clean: {same}"}


def kills_part(tmp: Path, prompts: int, kills: int, seed: int) -> dict:
    """Kill a run at a random moment, then rerun it, ``kills`` times on fresh workspaces.

    Every success the server served again must be one that a kill lost before it was recorded.
    """
    rng = random.Random(seed)
    srv = Server("", tmp / "kills.log")
    cfg = write_config(tmp, srv.url, prompts)
    _, clean_s = run(cfg, tmp / "clean-k", srv.url)
    clean = state(tmp / "clean-k")
    unrecorded = reserved = bad_integrity = killed = differ = 0
    for trial in range(kills):
        ws = tmp / f"killed-{trial}"
        seen: set[str] = set()  # request bodies served whole in this trial
        for kill_after in (rng.uniform(0.3, 0.9) * clean_s, None):
            before = len(state(ws)["ok_keys"]) if (ws / "arena.db").exists() else 0
            mark = len(served(tmp / "kills.log"))
            rc, _ = run(cfg, ws, srv.url, kill_after=kill_after)
            killed += rc == -signal.SIGKILL
            after = state(ws)
            bad_integrity += after["integrity"] != "ok"
            whole = [h for h, outcome in served(tmp / "kills.log")[mark:] if outcome == "ok"]
            reserved += sum(1 for h in whole if h in seen)
            seen.update(whole)
            unrecorded += len(whole) - (len(after["ok_keys"]) - before)  # answered, then lost with the process
        differ += state(ws)["battles"] != clean["battles"]
    srv.stop()
    duplicated = max(0, reserved - unrecorded) + bad_integrity
    return {"part": f"kills x{kills}", "calls": 9 * prompts, "faults": killed, "retries": reserved,
            "failed": 0, "lost": differ, "duplicated": duplicated, "seconds": clean_s,
            "note": f"{killed} of {kills} runs killed mid-way; integrity ok after every kill: {bad_integrity == 0}; "
                    f"reruns equal the clean run: {kills - differ}/{kills}; {reserved} successes asked again, "
                    f"{unrecorded} answers lost in flight at a kill"}


def load_part(n: int, concurrency: int) -> dict:
    from arena_learning.config import ModelSpec
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import CallStats, run_requests
    from arena_learning.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        srv = Server("", Path(tmp) / "load.log")
        try:
            spec = ModelSpec(name="judge", engine="openai", model="m", base_url=srv.url, concurrency=concurrency,
                             params={"max_tokens": 8, "temperature": 0.0})
            fds_before = len(os.listdir("/proc/self/fd"))
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            schema = {"type": "object", "properties": {"score_a": {"type": "number"}, "score_b": {"type": "number"}}}
            requests = [Request(messages=[{"role": "user", "content": f"judge {i}"}], params={"json_schema": schema})
                        for i in range(n)]
            with Store(Path(tmp) / "ws") as store:
                stats = CallStats()
                engine = build_engine(spec)
                start = time.perf_counter()
                got = run_requests(store, engine, requests, stats=stats, show_progress=False)
                seconds = time.perf_counter() - start
                asyncio.run(engine.aclose()) if hasattr(engine, "aclose") else None
            gc.collect()
            fds_after = len(os.listdir("/proc/self/fd"))
            rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            loop = asyncio.new_event_loop()
            tasks_left = len(asyncio.all_tasks(loop))
            loop.close()
        finally:
            srv.stop()
    lost = sum(1 for c in got if c is None)
    return {"part": f"load c={concurrency}", "calls": n, "faults": 0, "retries": 0, "failed": stats.failed,
            "lost": lost, "duplicated": 0, "seconds": seconds,
            "note": f"{n / seconds:,.0f} calls/s; peak RSS +{rss_after - rss_before:.0f} MB; fds {fds_before}->"
                    f"{fds_after}; tasks left {tasks_left}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=334)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--load", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(faults_part(Path(tmp), args.prompts))
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(kills_part(Path(tmp), args.prompts, args.kills, args.seed))
    rows.append(load_part(args.load, 256))
    print(f"{'part':14s} {'calls':>6s} {'faults':>6s} {'retries':>7s} {'failed':>6s} {'lost':>4s} {'dup':>4s} "
          f"{'s':>6s}  note")
    for r in rows:
        print(f"{r['part']:14s} {r['calls']:6d} {r['faults']:6d} {r['retries']:7d} {r['failed']:6d} {r['lost']:4d} "
              f"{r['duplicated']:4d} {r['seconds']:6.1f}  {r['note']}")
    bad = sum(r["lost"] + r["duplicated"] for r in rows)
    print("OK: nothing lost, nothing duplicated" if bad == 0 else f"FAILED: {bad} lost or duplicated")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        sys.exit(main())
