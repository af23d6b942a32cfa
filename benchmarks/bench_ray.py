"""What the Ray backend costs on one machine: judge calls through Ray engine actors vs local asyncio.

2,000 judge-sized requests go to a local server that answers instantly (the one of
bench_openai_engine.py, in its own process on 127.0.0.1), through the `openai` engine and the
ledger, once in this process (the local backend) and once through the Ray backend (a local Ray
instance, engine actors holding the same engine; the ledger stays here). Same machine, same
process, alternating, each in a fresh workspace; the figure is calls/s and the ratio (goal: Ray
costs under 2x on one machine, i.e. ratio >= 0.5). Ray's start-up and the actors' start are
reported apart: they are paid once per run, not per call.

    python benchmarks/bench_ray.py [--n 2000] [--batch-size 64] [--replicas 1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_openai_engine import judge_messages, start_server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    import ray

    from arena_learning.config import ModelSpec, ScaleConfig
    from arena_learning.engines import build_engine, placed
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import CallStats, arun_requests
    from arena_learning.scale.ray_backend import ray_backend
    from arena_learning.store import Store

    server, url = start_server()
    try:
        spec = ModelSpec(name="judge", engine="openai", model="m", base_url=url, concurrency=args.concurrency)
        requests = [Request(messages=judge_messages(i)) for i in range(args.n)]

        def run_once() -> float:
            with tempfile.TemporaryDirectory() as tmp, Store(tmp) as store:
                stats = CallStats()
                engine = build_engine(spec)
                t0 = time.perf_counter()
                asyncio.run(arun_requests(store, engine, requests, stats=stats))
                wall = time.perf_counter() - t0
                assert stats.ok == args.n, stats
                return wall

        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 configure_logging=False)
        ray_start = time.perf_counter() - t0
        scale = ScaleConfig(backend="ray", batch_size=args.batch_size,
                            defaults={"replicas": args.replicas, "num_cpus": 0.5})
        local_walls, ray_walls, actor_start = [], [], 0.0
        run_once()  # warm up the server and this process
        with ray_backend(scale):
            t0 = time.perf_counter()
            build_engine(spec)  # starts the actor pool (kept for the timed runs)
            actor_start = time.perf_counter() - t0
            run_once()  # warm up the actors' connections
            for _ in range(args.rounds):
                ray_walls.append(run_once())
                with placed(None):  # the same process, engines here
                    local_walls.append(run_once())
        ray.shutdown()
        local, remote = min(local_walls), min(ray_walls)
        print(f"judge calls: {args.n} to an instant server on 127.0.0.1, concurrency {args.concurrency}, "
              f"best of {args.rounds} alternating rounds, 2 cores")
        print(f"local asyncio + ledger:         {args.n / local:8.0f} calls/s  ({local:.2f} s)")
        print(f"Ray backend + ledger:           {args.n / remote:8.0f} calls/s  ({remote:.2f} s; "
              f"{args.replicas} actor(s), batches of {args.batch_size})")
        print(f"ratio Ray / local (calls/s):    {local / remote:8.2f}  (goal >= 0.5: Ray costs under 2x)")
        print(f"paid once per run: ray.init {ray_start:.1f} s, actor pool start {actor_start:.1f} s")
        return 0 if local / remote >= 0.5 else 1
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    raise SystemExit(main())
