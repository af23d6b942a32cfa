"""Faults survived: an endpoint that fails 30% of the time loses nothing, duplicates nothing, pays nothing twice.

The model behind the fault-injecting server is a stand-in that answers at once (a real model
cannot answer hundreds of calls in a test); everything else is real: `arena serve`'s app on
127.0.0.1 with its fault middleware, the openai engine with its retries, the SQLite ledger.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

import httpx
import pytest

from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.base import Completion, Engine, Request
from arena_learning.engines.calls import CallStats, run_requests
from arena_learning.engines.faults import FAULT_KINDS, FaultSpec, install_faults
from arena_learning.engines.server import is_loopback, make_app
from arena_learning.errors import ArenaError
from arena_learning.store import Store

from .conftest import ARENA, ThreadServer, write_config


class InstantModel(Engine):
    """Answers every request at once with a text derived from it (deterministic)."""

    kind = "instant"

    async def complete(self, request: Request) -> Completion:
        text = (request.messages or [{}])[-1].get("content") or request.prompt or ""
        return Completion(text="echo " + hashlib.sha1(text.encode()).hexdigest()[:8], tokens_in=3, tokens_out=2,
                          finish_reason="stop")


def serve(faults: FaultSpec | None, api_key: str | None = None) -> ThreadServer:
    spec = ModelSpec(name="m", engine="imported")
    app = make_app("m", InstantModel(spec), api_key=api_key)
    return ThreadServer(install_faults(app, faults) if faults is not None else app)


def client(url: str, **kw) -> Engine:
    return build_engine(ModelSpec(name="remote", engine="openai", model="m", base_url=url, timeout_s=1.0,
                                  concurrency=32, params={"max_tokens": 8, "temperature": 0.0}, **kw))


REQUESTS = [Request(messages=[{"role": "user", "content": f"question {i}"}]) for i in range(400)]


def test_fault_specs_parse_and_bad_ones_say_what_is_wrong():
    spec = FaultSpec.parse("all=0.3;seed=4;retry_after=0.01")
    assert abs(sum(spec.rates.values()) - 0.3) < 1e-9 and set(spec.rates) == set(FAULT_KINDS) and spec.seed == 4
    assert FaultSpec.parse("429=0.1,reset=0.05").rates == {"429": 0.1, "reset": 0.05}
    for bad in ("nope=0.1", "429=x", "500=0.7,503=0.7"):
        with pytest.raises(ArenaError, match="--faults"):
            FaultSpec.parse(bad)


def test_thirty_percent_faults_lose_nothing_and_a_clean_rerun_completes(tmp_path):
    faults = FaultSpec.parse("all=0.3;seed=1;retry_after=0.01;slow_s=0.05;timeout_s=3")
    srv = serve(faults)
    try:
        with Store(tmp_path / "ws") as store:
            stats = CallStats()
            # a flaky endpoint: its empty replies are failures retried on the next run, not answers
            engine = client(srv.url, max_retries=2, empty_replies="fail", empty_retries=0)
            got = run_requests(store, engine, REQUESTS, stats=stats, show_progress=False)
            health = httpx.get(srv.url.removesuffix("/v1") + "/health").json()
            counts = store.call_counts()
    finally:
        srv.close()
    # every call is present or reported failed with its reason; none lost, none duplicated
    assert len(got) == len(REQUESTS) and stats.ok + stats.failed == len(REQUESTS)
    assert counts.get("ok", 0) == stats.ok and counts.get("error", 0) == stats.failed
    assert sum(health["faults"].values()) >= 0.2 * len(REQUESTS) and engine.retries > 0
    assert stats.failed > 0  # with 2 retries some calls do fail under 30% faults: reported, not hidden
    assert all("attempts" in e or "empty completion" in e for e in stats.errors), stats.errors[:3]
    # nothing paid twice: each success in the ledger is one reply the server served whole
    assert health["ok"] >= stats.ok
    # the faults stop; a rerun asks only what failed and ends where a clean run ends
    clean = serve(None)
    try:
        with Store(tmp_path / "ws") as store:
            again = CallStats()
            final = run_requests(store, client(clean.url), REQUESTS, stats=again, show_progress=False)
            served = httpx.get(clean.url.removesuffix("/v1") + "/health").json()
    finally:
        clean.close()
    assert again.cached == stats.ok and again.sent == stats.failed and served["requests"] == stats.failed
    fresh = serve(None)
    try:
        with Store(tmp_path / "clean") as store:
            reference = run_requests(store, client(fresh.url), REQUESTS, show_progress=False)
    finally:
        fresh.close()
    assert [c.text for c in final] == [c.text for c in reference]


def test_faults_come_only_from_the_installed_middleware_and_after_the_key_check():
    # the server itself never injects; install_faults adds the injector inside the API-key check
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    key = {"Authorization": "Bearer k"}
    for faults, status in ((None, 200), (FaultSpec.parse("500=1"), 500)):
        srv = serve(faults, api_key="k")
        try:
            assert httpx.post(srv.url + "/chat/completions", json=ask, headers=key).status_code == status
            assert httpx.post(srv.url + "/chat/completions", json=ask).status_code == 401  # never a fault
            assert httpx.get(srv.url + "/models", headers=key).status_code == 200  # only completions get faults
            health = httpx.get(srv.url.removesuffix("/v1") + "/health").json()
        finally:
            srv.close()
        assert health["faults"] == ({} if faults is None else {"500": 1})
        assert health["ok"] == (1 if faults is None else 0)


def test_a_bearer_token_is_required_when_set(tmp_path):
    srv = serve(None, api_key="s3cret")
    try:
        r = httpx.post(srv.url + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 401
        os.environ["ARENA_TEST_KEY"] = "s3cret"
        with Store(tmp_path / "ws") as store:
            got = run_requests(store, client(srv.url, api_key_env="ARENA_TEST_KEY"), REQUESTS[:3], show_progress=False)
        assert all(c is not None for c in got)
    finally:
        os.environ.pop("ARENA_TEST_KEY", None)
        srv.close()


def test_loopback_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")


def test_an_api_key_never_reaches_the_workspace_logs_or_report(tmp_path):
    secret = "sk-test-" + hashlib.sha1(str(tmp_path).encode()).hexdigest()
    srv = serve(None, api_key=secret)
    try:
        cfg = write_config(tmp_path / "c.yaml", f"""
name: secret
tasks: {{n: 6}}
models:
  - {{name: a, engine: openai, model: m, base_url: "{srv.url}", api_key_env: ARENA_SECRET_TEST,
      params: {{max_tokens: 8}}}}
  - {{name: b, engine: openai, model: m, base_url: "{srv.url}", api_key_env: ARENA_SECRET_TEST, revision: r2,
      params: {{max_tokens: 9}}}}
ratings: {{bootstrap: 5}}
""")
        ws = tmp_path / "ws"
        env = {**os.environ, "ARENA_SECRET_TEST": secret}
        proc = subprocess.run([*ARENA, "run", str(cfg), "-w", str(ws)], capture_output=True, text=True, env=env,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        report = subprocess.run([*ARENA, "report", str(ws), "-o", str(tmp_path / "out.html")], capture_output=True,
                                text=True, env=env, timeout=300)
        info = subprocess.run([*ARENA, "info", str(ws), "--json"], capture_output=True, text=True, env=env, timeout=300)
    finally:
        srv.close()
    assert '"ok"' in info.stdout  # the calls went through, authenticated
    written = [p for p in [*ws.rglob("*"), tmp_path / "out.html"] if p.is_file()]
    assert any(p.name == "arena.db" for p in written) and len(written) >= 3
    for p in written:
        assert secret.encode() not in p.read_bytes(), p
    for out in (proc.stdout, proc.stderr, report.stdout, report.stderr, info.stdout, info.stderr):
        assert secret not in out
