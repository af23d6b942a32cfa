from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
ARENA = [sys.executable, "-m", "arena_learning"]


def shared(*parts: str) -> Path:
    """Return a path in ../shared/data, or skip the test with a message when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (tests read ../shared/data beside the repository)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {out}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout}s")


def fenced(text: str, name: str) -> str | None:
    """Return what a judge prompt fences as ``name`` (e.g. "ANSWER A"), or None: what a scripted judge reads."""
    import re

    m = re.search(rf"<<<{name} (\w+)>>>\n(.*?)\n<<<END {name} \1>>>", text, re.DOTALL)
    return None if m is None else m.group(2)


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


SERVE_CONFIG = """
name: served
models:
  - name: gemma-2shot
    engine: llamacpp
    model: bundled
    mode: completion
    n_threads: 1
    prompt_format:
      few_shot:
        - ["What is 12 + 7?", "19"]
        - ["What is the capital of Japan?", "Tokyo"]
    params: {max_tokens: 16, temperature: 0.0, stop: ["\\n"]}
  - name: other
    engine: llamacpp
    model: bundled
"""


@pytest.fixture(scope="session")
def served_model(tmp_path_factory):
    """`arena serve` over the bundled model on 127.0.0.1, in its own process."""
    cfg = write_config(tmp_path_factory.mktemp("serve") / "serve.yaml", SERVE_CONFIG)
    port = free_port()
    proc = subprocess.Popen(
        [*ARENA, "serve", "--config", str(cfg), "--model", "gemma-2shot", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/v1", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class ThreadServer:
    """A real aiohttp server on 127.0.0.1 in a background thread (for endpoints we script)."""

    def __init__(self, app):
        import asyncio
        import threading

        from aiohttp import web

        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def close(self):
        import asyncio

        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
