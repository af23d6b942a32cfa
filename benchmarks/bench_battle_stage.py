"""The battle stage on 3,000 judge calls against a local judge that answers instantly.

arena-hard v0.1's 500 prompts and the answers of its 3 bundled models
(../shared/data/arena-hard-v0.1), every pair in both orders with the pairwise
judge: 500 x 3 x 2 = 3,000 judge calls. The judge is a tiny aiohttp server in
its own process on 127.0.0.1 that returns a valid pairwise verdict at once, so
the figure is what the arena itself costs per judge call (start-up, prompts,
ledger, parsing, storing), on the same cores as the server.

``arena battle CONFIG`` is timed as a subprocess, start-up included: cold (an
empty ledger, 3,000 calls sent) and warm (every call served by the ledger).
The baseline is arena-hard-auto's ``gen_judgment.py``, measured at about 50
calls/s against such a server: 60 s for these 3,000 calls. The goal is at most
2.5 s for the stage, cold and warm; the script exits 1 when it is missed.

    python benchmarks/bench_battle_stage.py [--repeat 3] [--goal 2.5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "arena-hard-v0.1"
ARENA = [sys.executable, "-m", "arena_learning"]
BASELINE_CALLS_PER_S = 50.0  # arena-hard-auto gen_judgment.py against an instant local server

VERDICT = json.dumps(
    {
        "id": "bench",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant",
                            "content": '{"explanation": "A is more complete.", "score_a": 7, "score_b": 4}'},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920},
    }
).encode()


def serve(port: int) -> None:
    """Run the instant judge: every chat completion is the same valid pairwise verdict."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=VERDICT, content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the judge server exited with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"the judge server did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def arena(*args: object) -> tuple[float, float]:
    """Run one arena command; return its wall time and CPU time (user + system) in seconds.

    Exits on failure, with the command's output. The CPU time is the command's own (the
    judge server is another process), so it shows what the arena costs when other work
    shares the cores and stretches the wall time.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([*ARENA, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"arena {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def write_config(path: Path, url: str) -> None:
    models = sorted(p.stem for p in (DATA / "model_answer").glob("*.jsonl"))
    lines = [
        "name: bench-battle",
        "prompts: {set: ingested}",
        "models:",
        *[f"  - {{name: {m}, engine: imported}}" for m in models],
        "judge:",
        "  kind: llm",
        "  name: bench-judge",
        "  template: pairwise",
        f"  model: {{name: judge, engine: openai, model: judge, base_url: '{url}', concurrency: 64}}",
        "battles: {schedule: all}",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def count_calls(ws: Path) -> dict[str, int]:
    """Return the workspace's ledger rows by status."""
    import sqlite3

    db = sqlite3.connect(ws / "arena.db")
    try:
        return dict(db.execute("SELECT status, COUNT(*) FROM calls GROUP BY status").fetchall())
    finally:
        db.close()


def count_judgments(ws: Path) -> int:
    """Return the number of games judged (one verdict each; identical judge prompts share a call)."""
    import sqlite3

    db = sqlite3.connect(ws / "arena.db")
    try:
        return db.execute("SELECT COUNT(*) FROM judgments WHERE status = 'ok'").fetchone()[0]
    finally:
        db.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="cold and warm runs each; the best counts")
    ap.add_argument("--goal", type=float, default=2.5, help="seconds the stage may take, cold and warm")
    args = ap.parse_args()
    if not (DATA / "question.jsonl").is_file() or not list((DATA / "model_answer").glob("*.jsonl")):
        print(f"skipped: arena-hard v0.1 not found at {DATA} (this benchmark reads ../shared/data beside the "
              "repository: question.jsonl and model_answer/*.jsonl)")
        return 0

    load = os.getloadavg()[0]
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    root = Path(tempfile.mkdtemp(prefix="bench-battle-"))
    try:
        wait_for(port, server)
        base = root / "base"
        arena("ingest", DATA / "question.jsonl", "--out", base)
        arena("import-answers", *sorted((DATA / "model_answer").glob("*.jsonl")), "-w", base)
        cfg = root / "battle.yaml"
        write_config(cfg, url)

        cold, warm = [], []
        calls = verdicts = 0
        for i in range(args.repeat):
            ws = root / f"ws{i}"
            shutil.copytree(base, ws)
            cold.append(arena("battle", cfg, "-w", ws))
            calls, verdicts = sum(count_calls(ws).values()), count_judgments(ws)
            if count_calls(ws) != {"ok": calls} or verdicts != 3000:
                raise SystemExit(f"the cold run did not judge every game: {count_calls(ws)}, {verdicts} verdicts")
            warm.append(arena("battle", cfg, "-w", ws))
            if count_calls(ws) != {"ok": calls}:
                raise SystemExit(f"the warm run changed the ledger: {count_calls(ws)}")
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(root, ignore_errors=True)

    baseline_s = verdicts / BASELINE_CALLS_PER_S
    (best_cold, cold_cpu), (best_warm, warm_cpu) = min(cold), min(warm)
    print(f"verdicts: {verdicts} (arena-hard v0.1: 500 prompts x 3 pairs x 2 orders), {calls} distinct judge calls "
          f"(identical judge prompts share one); load average before: {load:.2f} on {os.cpu_count()} cores")
    print(f"cold (empty ledger): {best_cold:.2f} s = {verdicts / best_cold:,.0f} verdicts/s, {cold_cpu:.2f} s CPU   "
          f"runs: {', '.join(f'{t:.2f}' for t, _ in cold)}")
    print(f"warm (all cached):   {best_warm:.2f} s = {verdicts / best_warm:,.0f} verdicts/s, {warm_cpu:.2f} s CPU   "
          f"runs: {', '.join(f'{t:.2f}' for t, _ in warm)}")
    print(f"baseline: arena-hard-auto gen_judgment at {BASELINE_CALLS_PER_S:.0f} calls/s = {baseline_s:.0f} s; "
          f"ratio {baseline_s / best_cold:.1f}x cold, {baseline_s / best_warm:.1f}x warm")
    missed = [name for name, t in (("cold", best_cold), ("warm", best_warm)) if t > args.goal]
    if missed:
        print(f"goal missed: {' and '.join(missed)} above {args.goal:.1f} s")
        return 1
    print(f"goal met: cold and warm at most {args.goal:.1f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        sys.exit(main())
