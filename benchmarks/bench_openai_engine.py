"""Throughput of the `openai` engine through the ledger against a local server that answers instantly.

The server runs in its own process on 127.0.0.1 (sharing this 2-core machine),
so the figure is bounded by the client's CPU: what the arena pays per judge call.
Baselines in the same process: raw aiohttp posts with no ledger and no retries.

    python benchmarks/bench_openai_engine.py [--n 5000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time

REPLY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"score_a": 7, "score_b": 4}'},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 600, "completion_tokens": 12, "total_tokens": 612},
    }
).encode()


def serve(port: int) -> None:
    from aiohttp import web

    async def handle(request):
        await request.read()
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    """Start the instant server in its own process; return it and its base URL once it listens."""
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}/v1"


def judge_messages(i: int) -> list[dict[str, str]]:
    # A judge-sized request: a question and two answers of ~1 KB each.
    return [{"role": "system", "content": "You are a judge."},
            {"role": "user", "content": f"Question {i}\n" + "answer A text " * 80 + "\n" + "answer B text " * 80}]


async def raw_aiohttp(url: str, n: int, concurrency: int) -> None:
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(i: int) -> None:
            async with sem:
                async with session.post(url + "/chat/completions",
                                        json={"model": "m", "messages": judge_messages(i)}) as r:
                    json.loads(await r.read())

        await asyncio.gather(*(one(i) for i in range(n)))


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()

    from arena_learning.config import ModelSpec
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import CallStats, run_requests
    from arena_learning.store import Store

    server, url = start_server()
    try:
        spec = ModelSpec(name="judge", engine="openai", model="m", base_url=url, concurrency=args.concurrency)
        requests = [Request(messages=judge_messages(i)) for i in range(args.n)]
        asyncio.run(raw_aiohttp(url, 200, args.concurrency))  # warm up both sides

        raw_wall, raw_cpu = timed(lambda: asyncio.run(raw_aiohttp(url, args.n, args.concurrency)))
        with tempfile.TemporaryDirectory() as tmp, Store(tmp) as store:
            stats = CallStats()
            ours_wall, ours_cpu = timed(
                lambda: run_requests(store, build_engine(spec), requests, stats=stats, show_progress=False)
            )
            assert stats.ok == args.n, stats
            cached_wall, _ = timed(lambda: run_requests(store, build_engine(spec), requests, show_progress=False))
            ledger_rows = store.call_counts()
        print(f"requests: {args.n}, concurrency {args.concurrency}, server in another process on 127.0.0.1")
        print(f"raw aiohttp (no ledger):      {args.n / raw_wall:8.0f} req/s  {1000 * raw_cpu / args.n:.3f} ms CPU/req")
        print(f"openai engine + ledger:       {args.n / ours_wall:8.0f} req/s"
              f"  {1000 * ours_cpu / args.n:.3f} ms CPU/req  (goal >= 1000 req/s)")
        print(f"ratio engine+ledger / raw:    {raw_wall / ours_wall:8.2f}")
        print(f"rerun served by the ledger:   {args.n / cached_wall:8.0f} req/s  (ledger rows {ledger_rows})")
    finally:
        server.terminate()
        server.wait()
    return 0 if args.n / ours_wall >= 1000 else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        raise SystemExit(main())
