"""Attacks on `arena serve`, on its real aiohttp server on 127.0.0.1 (the model a stand-in that answers at once, as in
test_faults): a rebound Host, a cross-site text/plain POST, a negative or non-numeric Content-Length, a held-open
connection, a non-ASCII key; each asserts the exact status and that no completion was run. And the command itself
refuses to serve beyond loopback without an API key of 128 bits unless told, before it binds anything."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines.base import Completion, Request
from arena_learning.engines.server import make_app

from .conftest import ARENA, ThreadServer
from .raw_http import JSON, assert_a_cross_site_post_is_refused, assert_a_held_connection_blocks_nobody, request
from .raw_http import assert_the_guard_holds as guard_holds
from .test_faults import InstantModel

KEY = "an-api-key-of-well-over-22-characters"
AUTH = ("Authorization", f"Bearer {KEY}")
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
def served():
    srv = ThreadServer(make_app("m", InstantModel(ModelSpec(name="m", engine="imported")), api_key=KEY,
                                allow_hosts=["models.example.org"]))
    yield srv
    srv.close()


def health(port: int) -> dict:
    return json.loads(request(port, "GET", "/health")[2])


def test_a_foreign_host_a_cross_site_post_and_bad_lengths_are_refused_and_run_nothing(served):
    port = served.port
    guard_holds(port, "/v1/models", "/v1/chat/completions", CHAT, [AUTH])
    assert_a_cross_site_post_is_refused(port, "/v1/completions", b'{"model": "m", "prompt": "hi"}', [AUTH])
    assert health(port)["requests"] == 0  # none reached the model
    status, _, body = request(port, "POST", "/v1/chat/completions", [JSON, AUTH], CHAT, host="models.example.org")
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"].startswith("echo ")
    assert request(port, "GET", "/v1/models", [AUTH], host=f"localhost:{port}")[0] == 200
    assert health(port)["requests"] == 1


def test_a_held_connection_and_a_non_ascii_key_are_answered_not_dropped(served):
    port = served.port
    assert_a_held_connection_blocks_nobody(port, "/health", closed_within_s=None)
    for key in (b"Bearer \xe9\xff", "Bearer é".encode(), b"\xff" * 40, f"Bearer {KEY[:-1]}".encode()):
        status, _, body = request(port, "POST", "/v1/chat/completions", [JSON, ("Authorization", key)], CHAT)
        assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    assert health(port)["requests"] == 0


def _serve(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `arena serve` with a config that cannot load: every refusal here comes first, before anything binds."""
    return subprocess.run([*ARENA, "serve", "--config", str(tmp_path / "no-such.yaml"), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_serve_refuses_to_listen_beyond_loopback_without_a_strong_key_unless_told(tmp_path):
    bare = _serve(tmp_path, "--host", "0.0.0.0")
    assert bare.returncode == 2 and "--api-key-env" in bare.stderr and "--no-api-key" in bare.stderr
    weak = _serve(tmp_path, "--host", "0.0.0.0", "--api-key-env", "ARENA_TEST_WEAK_KEY",
                  env={"ARENA_TEST_WEAK_KEY": "short"})
    assert weak.returncode == 2 and "at least 22 characters" in weak.stderr
    told = _serve(tmp_path, "--host", "0.0.0.0", "--no-api-key")  # told: a warning, then the config's own error
    assert told.returncode == 2 and "without an API key" in told.stderr and "no-such.yaml" in told.stderr
    local = _serve(tmp_path, "--api-key-env", "ARENA_TEST_WEAK_KEY", env={"ARENA_TEST_WEAK_KEY": "short"})
    assert local.returncode == 2 and "22 characters" not in local.stderr  # on loopback any key will do


class HeldModel(InstantModel):
    """Answers once ``release`` is set: requests stay in flight as long as the test wants."""

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.release = threading.Event()

    async def complete(self, request: Request) -> Completion:
        await asyncio.to_thread(self.release.wait, 60)
        return await super().complete(request)


def test_requests_past_the_cap_are_told_to_retry_and_the_others_are_answered():
    model = HeldModel(ModelSpec(name="m", engine="imported"))
    srv = ThreadServer(make_app("m", model, max_in_flight=2))
    try:
        with ThreadPoolExecutor(2) as pool:
            held = [pool.submit(request, srv.port, "POST", "/v1/chat/completions", [JSON], CHAT) for _ in range(2)]
            for _ in range(400):  # until both are with the model (event order, not a time window)
                if health(srv.port)["requests"] == 2:
                    break
                time.sleep(0.05)
            status, headers, _ = request(srv.port, "POST", "/v1/chat/completions", [JSON], CHAT)
            assert status == 503 and headers["retry-after"] == "1"
            model.release.set()
            assert [f.result()[0] for f in held] == [200, 200]
        assert request(srv.port, "POST", "/v1/chat/completions", [JSON], CHAT)[0] == 200
        assert health(srv.port)["ok"] == 3
    finally:
        model.release.set()
        srv.close()
