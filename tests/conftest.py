from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Two pytest workers share two cores, and the CLI runs in subprocesses beside them. OpenMP's idle threads (torch's)
# spin while they wait for work, on the very core another process needs: passive, they sleep instead. The same
# work split the same way (the same numbers), a fifth less time for two torch tests side by side. Set before torch
# is imported (OpenMP reads it once) and inherited by every subprocess; a value already set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Every Ray instance the suite starts (the Ray tests', a CLI's --ray local) on 127.0.0.1: Ray otherwise takes the
# address of the machine's network interface, and the tests' traffic stays on loopback. Ray reads it when imported;
# inherited by subprocesses.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# The suite trains and answers in this process as the `arena` command does in its own: with torch's CPU kernels
# pinned to AVX2 (cpu_isa), which the command sets and importing the package does not; inherited by subprocesses.
from arena_learning.cpu_isa import pin_cpu_isa

pin_cpu_isa()

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
ARENA = [sys.executable, "-m", "arena_learning"]


@dataclass
class Ran:
    """What ``arena(...)`` returns: a finished command's exit code and its two streams (as subprocess.run's)."""

    returncode: int
    stdout: str
    stderr: str


def arena(*args: Any, cwd: Path | None = None, env: Mapping[str, str] | None = None, input: str | None = None) -> Ran:
    """Run ``arena ARGS`` in this process (the Typer app through typer's CliRunner) and return its exit code, stdout
    and stderr. A new interpreter would import torch and TRL again for each command (seconds a call); run ``ARENA``
    as a subprocess only where the process itself is what is tested (a real exit code, a kill, a signal, a server
    in its own process). ``env`` adds variables for the command alone; the working folder, warning filters and
    torch's thread count are put back afterwards and the transformers models it loaded are dropped, as a finished
    process would leave them."""
    import traceback
    import warnings

    import torch
    from typer.testing import CliRunner

    from arena_learning.cli import app

    before, threads = Path.cwd(), torch.get_num_threads()  # a training or an engine may set torch's threads
    try:
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings():
            res = CliRunner().invoke(app, [str(a) for a in args], env=dict(env or {}), input=input)
    finally:
        os.chdir(before)
        torch.set_num_threads(threads)
        _release_models()
    stderr = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):  # a crash: its traceback, as python's
        stderr += "".join(traceback.format_exception(res.exception))
    return Ran(res.exit_code, res.stdout, stderr)


def _release_models() -> None:
    """Drop the transformers models a command loaded (float32 weights: a process would free them at its exit). The
    llama.cpp models stay loaded, as between the in-process engine tests: memory-mapped, their pages shared."""
    from arena_learning.engines import transformers_engine

    transformers_engine.release_models()


# What the tests' runs measure and record (arena plan's rates: engines.speed) stays out of the machine's own rates
# file: one per test process, subprocesses included (they inherit the environment).
_TMP = Path(os.environ.get("TMPDIR", "/tmp"))
os.environ.setdefault("ARENA_RATES", str(_TMP / f"arena-test-rates-{os.getpid()}.json"))


def shared(*parts: str) -> Path:
    """Return a path in ../shared/data, or skip the test with a message when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (tests read ../shared/data beside the repository)")
    return path


def load_benchmark(name: str) -> Any:
    """Return benchmarks/NAME.py as module NAME (once per process: a script imports its siblings by name)."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # before it runs: its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (it appends them to the test ids)
def pytest_collection_modifyitems(config, items):
    """Group every test that uses one of this suite's module- or session-scoped fixtures by that fixture, so that
    ``pytest -n 2 --dist loadgroup`` (``make test``) sends them to one worker and the fixture (a trained
    flywheel, a served model, a Ray instance, an embedded test set) is built once, not once per worker."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the test's fixtures
        if info is None:
            continue
        groups = set()
        for name in item.fixturenames:
            defs = info.name2fixturedefs.get(name)
            if not defs or defs[-1].scope not in ("module", "session") or name == "module_tmp":
                continue
            if not getattr(defs[-1].func, "__module__", "").startswith("tests."):
                continue  # pytest's and plugins' own (tmp_path_factory, ...): cheap
            groups.add(name if defs[-1].scope == "session" else item.module.__name__)
        for group in sorted(groups):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="module")
def module_tmp(request, tmp_path_factory):
    """A folder for one test module's shared fixture, removed when the module ends with no failed test.

    Flywheel and training tests write full model folders (about 1 GB each in float32): pytest keeps
    module fixtures' folders until the session ends, which filled a CI machine's disk. The folder
    of a module with a failure stays for its post-mortem (as `tmp_path_retention_policy = "failed"`
    keeps the folders of failed tests).
    """
    import shutil

    failed_before = request.session.testsfailed
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    yield path
    if request.session.testsfailed == failed_before:
        shutil.rmtree(path, ignore_errors=True)


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
    parallel: 8
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
    """A real aiohttp server on 127.0.0.1 in a background thread: serves an app (`arena serve`'s own, or a
    ScriptedServer's)."""

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


# ---- scripted OpenAI-compatible endpoints --------------------------------------------------------------


@dataclass
class Reply:
    """One scripted reply of a ScriptedServer, sent in the OpenAI chat/completions (or completions) shape.

    ``content`` None is sent as ``content: null``; ``status`` other than 200 sends ``{"error": {"message":
    error}}`` instead of a completion; ``usage`` is (prompt_tokens, completion_tokens), or None for the server's;
    ``message`` and ``usage_extra`` add fields (``reasoning_content``, ``completion_tokens_details``); ``delay``
    waits that many seconds before replying."""

    content: str | None = "ok"
    finish: str = "stop"
    status: int = 200
    error: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] | None = None
    message: dict[str, Any] = field(default_factory=dict)
    usage_extra: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0

    def body(self, request: dict[str, Any], usage: tuple[int, int]) -> dict[str, Any]:
        if self.status != 200:
            return {"error": {"message": self.error}}
        if "messages" in request:
            choice: dict[str, Any] = {"message": {"role": "assistant", "content": self.content, **self.message}}
        else:  # /v1/completions
            choice = {"text": self.content}
        tokens_in, tokens_out = self.usage or usage
        return {"choices": [{**choice, "index": 0, "finish_reason": self.finish}],
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, **self.usage_extra}}


def http_error(status: int, message: str = "scripted error", **headers: str) -> Reply:
    """A scripted HTTP error reply (429, 5xx, 400) with its headers (e.g. ``**{"Retry-After": "1"}``)."""
    return Reply(status=status, error=message, headers=headers)


Script = Callable[[dict[str, Any]], "str | Reply | None"] | str | Reply


class ScriptedServer:
    """A real OpenAI-compatible endpoint on 127.0.0.1 (POST /v1/chat/completions and /v1/completions) whose replies
    the test scripts: a real model cannot be made to misbehave on demand.

    ``script`` is one reply for every request, a function of the request's JSON body that returns one, or a list
    of those used in turn, the last one for every request after. A reply is its text (a str, or None for
    ``content: null``) or a Reply (status codes, headers, finish reasons, delays, usage, extra message fields).
    ``usage`` is every reply's (prompt_tokens, completion_tokens) unless the Reply says; ``delay`` (seconds) holds
    every reply. The server records every request: ``bodies`` (JSON), ``headers``, ``arrivals`` (time.monotonic()
    on arrival), and ``peak``, the most requests in flight at once."""

    def __init__(self, script: Script | list[Script], usage: tuple[int, int] = (5, 2), delay: float = 0.0):
        from aiohttp import web

        self.script, self.usage, self.delay = script, usage, delay
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[Mapping[str, str]] = []  # case-insensitive, as HTTP headers are
        self.arrivals: list[float] = []
        self.in_flight = self.peak = 0
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        self.server = ThreadServer(app)
        self.url = self.server.url

    @property
    def requests(self) -> int:
        return len(self.bodies)

    def _reply(self, body: dict[str, Any]) -> Reply:
        step = self.script
        if isinstance(step, list):
            step = step[min(len(self.bodies) - 1, len(step) - 1)]
        reply = step(body) if callable(step) else step
        return reply if isinstance(reply, Reply) else Reply(content=reply)

    async def _handle(self, request):
        import asyncio

        from aiohttp import web

        self.arrivals.append(time.monotonic())
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            body = await request.json()
            self.headers.append(request.headers.copy())
            self.bodies.append(body)
            reply = self._reply(body)
            if self.delay + reply.delay:
                await asyncio.sleep(self.delay + reply.delay)
            return web.json_response(reply.body(body, self.usage), status=reply.status, headers=reply.headers)
        finally:
            self.in_flight -= 1

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def scripted_server():
    """Start ScriptedServers: ``scripted_server(script, **options)``; every one is closed after the test."""
    servers: list[ScriptedServer] = []

    def start(script: Script | list[Script], **options: Any) -> ScriptedServer:
        servers.append(ScriptedServer(script, **options))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def batch_server(scripted_server):
    """Start local Files and Batches doubles (tests/batch_server.py) over scripted models: ``batch_server(script,
    **options)`` -> (the BatchServer, its base URL, the ScriptedServer behind it); each is closed after the test."""
    from .batch_server import BatchServer

    started: list[ThreadServer] = []

    def start(script: Script | list[Script], **options: Any) -> tuple[BatchServer, str, ScriptedServer]:
        upstream = scripted_server(script)
        server = BatchServer(upstream.url, **options)
        started.append(ThreadServer(server.app))
        return server, started[-1].url, upstream

    yield start
    for s in started:
        s.close()


@pytest.fixture
def messages_server():
    """Start local stand-ins for Anthropic's Messages and Message Batches endpoints (tests/anthropic_server.py):
    ``messages_server(script, **options)`` -> the MessagesServer; each is closed after the test."""
    from .anthropic_server import MessagesServer

    servers: list[MessagesServer] = []

    def start(script: Script, **options: Any) -> MessagesServer:
        servers.append(MessagesServer(script, **options))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@dataclass
class TrainedFlywheel:
    """A flywheel run to its end once per test session: its config, workspace, ``--json`` report and rates file."""

    config: dict[str, Any]
    workspace: Path
    report: dict[str, Any]
    rates: Path  # the rates file the run recorded its answering and training speeds in


def trained_flywheel_config() -> dict[str, Any]:
    """test_plan's small flywheel (one SFT round of three steps on 6 prompts, a test set of 9), trained through
    ``accelerate launch`` on the CPU and served through llama.cpp from its GGUF export: both paths in one run."""
    import json

    from .test_plan import FLYWHEEL

    data = json.loads(json.dumps(FLYWHEEL))
    data["training"]["sft"]["max_steps"] = 3  # an epoch: past Adam's first step, whose size is the gradient's sign
    data["training"]["serve_as"] = "llamacpp"
    data["training"]["launch"] = {"launcher": "accelerate", "accelerate_config": "multi_gpu", "num_processes": 1,
                                  "cpu": True}
    return data


@pytest.fixture(scope="session")
def trained_flywheel(tmp_path_factory) -> TrainedFlywheel:
    """One trained flywheel workspace for the whole session, shared by the tests that need a trained model and
    only read it. Built under a file lock in the session's shared temporary folder: whichever test process
    (pytest-xdist worker) comes first trains it, the others wait and read it (``--dist loadgroup`` sends its
    users to one worker; the lock keeps it built once under any other scheduling too)."""
    import json
    import shutil

    import yaml
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder the workers of this session share
    root = base / "trained-flywheel"
    data = trained_flywheel_config()
    with FileLock(str(root) + ".lock"):
        if not (root / "report.json").is_file():
            shutil.rmtree(root, ignore_errors=True)  # a build that failed midway starts again
            root.mkdir(parents=True)
            cfg = write_config(root / "flywheel.yaml", yaml.safe_dump(data, sort_keys=False))
            ran = arena("flywheel", cfg, "-w", root / "ws", "--json", env={"ARENA_RATES": str(root / "rates.json")})
            assert ran.returncode == 0, ran.stderr[-3000:]
            json.loads(ran.stdout)  # the whole report, or the build fails here
            (root / "report.json").write_text(ran.stdout, encoding="utf-8")
    return TrainedFlywheel(data, root / "ws", json.loads((root / "report.json").read_text(encoding="utf-8")),
                           root / "rates.json")
