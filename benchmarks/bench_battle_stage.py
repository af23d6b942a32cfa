"""The battle stage on 3,000 judge games against a local judge that answers instantly.

arena-hard v0.1's 500 prompts and the answers of its 3 bundled models
(../shared/data/arena-hard-v0.1), every pair in both orders with the pairwise
judge: 500 x 3 x 2 = 3,000 judge calls. The judge is a tiny aiohttp server in
its own process on 127.0.0.1 that returns a valid pairwise verdict at once, so
the figure is what the arena itself costs per judge call (start-up, prompts,
ledger, parsing, storing), on the same cores as the server.

``arena battle CONFIG`` is timed as a subprocess, start-up included: cold (an
empty ledger: 3,000 games and the canaries' 144, 3,123 distinct calls sent) and
warm (every call served by the ledger). The commands run with their bytecode
cached (``PYTHONDONTWRITEBYTECODE`` is dropped for them), as an installed arena
runs: compiling its ~60 modules from source on every start (0.1-0.15 s) is no
cost of the arena's. The baseline is arena-hard-auto's ``gen_judgment.py``,
measured at about 50 calls/s against such a server: 60 s for these 3,000
calls. The goal is at most 1.5 s cold and 0.8 s warm; the script exits 1 when
either is missed. ``--record`` appends the best cold and warm times to
``benchmarks/results.jsonl`` (``make bench-check`` compares with them);
``--src`` times another checkout's sources (bisecting).

    python benchmarks/bench_battle_stage.py [--repeat 3] [--goal 1.5] [--goal-warm 0.8] [--record]
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

from results import emit  # benchmarks/results.py: the results log

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


SRC = REPO / "src"  # --src: another checkout's sources (bisecting)


def arena(*args: object) -> tuple[float, float]:
    """Run one arena command; return its wall time and CPU time (user + system) in seconds.

    Exits on failure, with the command's output. The CPU time is the command's own (the
    judge server is another process), so it shows what the arena costs when other work
    shares the cores and stretches the wall time.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([*ARENA, *map(str, args)], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(SRC)})
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
    """Return the number of test-set games judged (one verdict each; identical judge prompts share a call).

    The canaries' games (their own set, ``canary/test``) are not counted: they are the audit's, not the run's.
    """
    import sqlite3

    db = sqlite3.connect(ws / "arena.db")
    try:
        return db.execute("SELECT COUNT(*) FROM judgments WHERE status = 'ok' AND set_name = 'test'").fetchone()[0]
    finally:
        db.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="cold and warm runs each; the best counts")
    ap.add_argument("--goal", type=float, default=1.5, help="seconds the stage may take cold")
    ap.add_argument("--goal-warm", type=float, default=0.8, help="seconds the stage may take warm")
    ap.add_argument("--record", action="store_true", help="append the figures to benchmarks/results.jsonl")
    ap.add_argument("--src", type=Path, default=None, help="run the arena from this src folder (another checkout)")
    args = ap.parse_args()
    global SRC
    if args.src is not None:
        SRC = args.src.resolve()
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
    command = f"python benchmarks/bench_battle_stage.py --repeat {args.repeat}"
    note = f"{verdicts:,} games, {calls:,} judge calls (canaries on), best of {args.repeat}"
    emit("battle_stage.cold_s", best_cold, "s", "lower", command, note + ", empty ledger", record_it=args.record)
    emit("battle_stage.warm_s", best_warm, "s", "lower", command, note + ", every call in the ledger",
         record_it=args.record)
    missed = [f"{name} {t:.2f} s above {goal:.1f} s" for name, t, goal in
              (("cold", best_cold, args.goal), ("warm", best_warm, args.goal_warm)) if t > goal]
    if missed:
        print(f"goal missed: {' and '.join(missed)}")
        return 1
    print(f"goal met: cold at most {args.goal:.1f} s, warm at most {args.goal_warm:.1f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        sys.exit(main())
