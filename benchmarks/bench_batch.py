"""A battle stage of 3,000 judge calls in batch mode, split into several jobs, killed while they are open, resumed.

arena-hard v0.1's 500 prompts and its 3 bundled models' answers (../shared/data/arena-hard-v0.1), every pair in
both orders with the pairwise judge: 3,000 games. The judge is a deterministic scripted server on 127.0.0.1 (each
answer's score a hash of its text, so every verdict is fixed); the Files and Batches endpoints are the tests'
local double (tests/batch_server.py, in its own process), which runs each line against that judge and counts
the jobs created and every request body it sends. Three runs of ``arena battle``, each a subprocess:

1. synchronous, one request each (the baseline: its verdicts and its wall time);
2. batch mode, ``max_requests: 500``: the games in 6 jobs, then the canaries in one more;
3. batch mode again on a fresh workspace, the double holding every line: killed (SIGKILL) once the games' 6 jobs
   are created, then run again, which must find the 6 open jobs and wait for them.

The goal: every verdict of runs 2 and 3 equal to run 1's, no request body sent twice, 7 jobs created by each
batch run (none twice after the kill). It prints the wall times (batch mode polls every ``poll_s``, so its time
is the double's work plus the polls, not a measure of a hosted API's 24 h window); ``--record`` appends them to
benchmarks/results.jsonl. Exit 1 when a goal is missed.

    python benchmarks/bench_batch.py [--max-requests 500] [--record]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_battle_stage import ARENA, DATA, REPO, arena, free_port, wait_for  # the same data and commands
from results import emit  # benchmarks/results.py: the results log

GAMES = 3000  # 500 prompts x 3 pairs x 2 orders
FENCE = re.compile(r"<<<(ANSWER [AB]) (\w+)>>>\n(.*?)\n<<<END \1 \2>>>", re.DOTALL)


def serve_judge(port: int) -> None:
    """Run the deterministic pairwise judge: each answer scores a hash of its text, 1 to 10."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        answers = {m.group(1): m.group(3) for m in FENCE.finditer(body["messages"][-1]["content"])}
        score = {k: int(hashlib.sha256(v.encode()).hexdigest(), 16) % 10 + 1 for k, v in answers.items()}
        verdict = {"explanation": "scored", "score_a": score.get("ANSWER A", 1), "score_b": score.get("ANSWER B", 1)}
        return web.json_response({"object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": json.dumps(verdict)}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920}})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def write_config(path: Path, url: str, batch: dict | None) -> Path:
    models = sorted(p.stem for p in (DATA / "model_answer").glob("*.jsonl"))
    judge = {"name": "judge", "engine": "openai", "model": "judge", "base_url": url, "concurrency": 64}
    if batch is not None:
        judge["batch"] = {"enabled": True, **batch}
    cfg = {"name": "bench-batch", "prompts": {"set": "ingested"},
           "models": [{"name": m, "engine": "imported"} for m in models],
           "judge": {"kind": "llm", "name": "bench-judge", "template": "pairwise", "model": judge},
           "battles": {"schedule": "all"}}
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    return path


def verdicts(ws: Path) -> dict[tuple[str, str, str, str], str | None]:
    """Return every judgment's verdict (canaries' included), by set, prompt and the models in their order."""
    db = sqlite3.connect(ws / "arena.db")
    try:
        rows = db.execute("SELECT set_name, prompt_id, model_a, model_b, data FROM judgments").fetchall()
    finally:
        db.close()
    return {(s, p, a, b): json.loads(d)["verdict"] for s, p, a, b, d in rows}


def stats(url: str, action: str = "") -> dict[str, int]:
    """Return the double's counts (``action``: '_hold', '_release' or '_reset' first)."""
    if action:
        urllib.request.urlopen(urllib.request.Request(f"{url}/{action}", method="POST", data=b"")).read()
    with urllib.request.urlopen(f"{url}/_stats") as resp:
        return json.loads(resp.read())


def killed_then_resumed(cfg: Path, ws: Path, url: str, jobs: int) -> tuple[float, int]:
    """Run the stage with the double holding, kill it once ``jobs`` jobs are created, release, run it again; return
    the rerun's wall time and the jobs created before the kill."""
    stats(url, "_reset")
    stats(url, "_hold")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([*ARENA, "battle", str(cfg), "-w", str(ws)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while stats(url)["created"] < jobs and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # the last id stored as its creation returned
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = stats(url, "_release")["created"]
    wall, _ = arena("battle", cfg, "-w", ws)
    return wall, before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-requests", type=int, default=500, help="calls per job (3,000 games: 6 jobs)")
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between two looks at the open jobs")
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    args = ap.parse_args()
    if not (DATA / "question.jsonl").is_file() or not list((DATA / "model_answer").glob("*.jsonl")):
        print(f"skipped: arena-hard v0.1 not found at {DATA} (this benchmark reads ../shared/data beside the "
              "repository: question.jsonl and model_answer/*.jsonl)")
        return 0
    judge_port, double_port = free_port(), free_port()
    judge_url, url = f"http://127.0.0.1:{judge_port}/v1", f"http://127.0.0.1:{double_port}/v1"
    judge = subprocess.Popen([sys.executable, __file__, "--serve", str(judge_port)])
    double = subprocess.Popen([sys.executable, str(REPO / "tests" / "batch_server.py"), "--upstream", judge_url,
                               "--port", str(double_port), "--concurrency", "64"])
    root = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    batch = {"max_requests": args.max_requests, "poll_s": args.poll}
    jobs = -(-GAMES // args.max_requests)
    try:
        wait_for(judge_port, judge)
        wait_for(double_port, double)
        base = root / "base"
        arena("ingest", DATA / "question.jsonl", "--out", base)
        arena("import-answers", *sorted((DATA / "model_answer").glob("*.jsonl")), "-w", base)
        runs = {name: root / name for name in ("sync", "batch", "resumed")}
        for ws in runs.values():
            shutil.copytree(base, ws)
        sync_s, _ = arena("battle", write_config(root / "sync.yaml", judge_url, None), "-w", runs["sync"])
        cfg = write_config(root / "batch.yaml", url, batch)
        batch_s, _ = arena("battle", cfg, "-w", runs["batch"])
        first = stats(url)
        resumed_s, created_before_kill = killed_then_resumed(cfg, runs["resumed"], url, jobs)
        second = stats(url)
    finally:
        for proc in (judge, double):
            proc.terminate()
            proc.wait(10)
    try:
        reference = verdicts(runs["sync"])
        same = [verdicts(runs[n]) == reference for n in ("batch", "resumed")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    created = [first["created"], second["created"]]
    twice = first["duplicates"] + second["duplicates"]
    games = sum(1 for k in reference if k[0] == "test")
    print(f"{games} games, {len(reference)} judgments with the canaries'; jobs of at most {args.max_requests} calls")
    print(f"synchronous: {sync_s:.2f} s; batch mode: {batch_s:.2f} s ({created[0]} jobs, polled every "
          f"{args.poll} s); killed with {created_before_kill} jobs open, the rerun: {resumed_s:.2f} s "
          f"({created[1]} jobs created in all)")
    print(f"requests sent twice: {twice}; verdicts equal to the synchronous run's: {same[0]} (batch), "
          f"{same[1]} (killed and resumed); ratio batch/synchronous {batch_s / sync_s:.1f}x")
    command = f"python benchmarks/bench_batch.py --max-requests {args.max_requests}"
    note = f"{games:,} games in {created[0]} jobs of <= {args.max_requests} calls, local Batch API double, poll " \
           f"{args.poll} s"
    emit("batch_stage.sync_s", sync_s, "s", "lower", command, note + ": the synchronous baseline",
         record_it=args.record)
    emit("batch_stage.batch_s", batch_s, "s", "lower", command, note, record_it=args.record)
    emit("batch_stage.resumed_s", resumed_s, "s", "lower", command, note + ", rerun after a kill -9 with the "
         "jobs open", record_it=args.record)
    missed = []
    if games != GAMES or not all(same):
        missed.append(f"verdicts differ from the synchronous run's ({games} games; equal: {same})")
    if twice:
        missed.append(f"{twice} requests sent twice")
    if created[0] != created[1] or created_before_kill != jobs:
        missed.append(f"jobs created: {created} (expected the same in both runs, {jobs} before the kill)")
    if missed:
        print("goal missed: " + "; ".join(missed))
        return 1
    print(f"goal met: every verdict equal, 0 requests sent twice, {created[1]} jobs created by the resumed run "
          f"as by the uninterrupted one")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve_judge(int(sys.argv[2]))
    else:
        sys.exit(main())
