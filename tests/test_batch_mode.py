"""Batch mode end to end: a battle stage's judge calls as Batch API jobs on the local Files and Batches double
(tests/batch_server.py), answered by a scripted deterministic judge on 127.0.0.1, against the same stage run one
request each: the same verdicts, the same ledger keys, no request sent twice, a killed run resumed by polling."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from contextlib import contextmanager

import pytest

from arena_learning import pipeline, progress
from arena_learning.config import RunConfig
from arena_learning.records import Answer, Prompt
from arena_learning.store import Store

from .batch_server import BatchServer
from .conftest import ARENA, Reply, ThreadServer, fenced, http_error

MODELS = ("alpha", "beta", "gamma")
PROMPTS = 30  # x 3 pairs x 2 orders = 180 judge calls


def judge(body):
    """A deterministic pairwise judge: each answer's score is a hash of its text (so every verdict is fixed)."""
    user = body["messages"][-1]["content"]

    def score(name):
        return int(hashlib.sha256((fenced(user, name) or "").encode()).hexdigest(), 16) % 10 + 1

    return Reply(json.dumps({"explanation": "scored", "score_a": score("ANSWER A"), "score_b": score("ANSWER B")}),
                 usage=(len(user) // 4, 12))


def flaky(fails: set[str]):
    """``judge``, but a prompt's first request fails (HTTP 500) when the prompt names one of ``fails``."""
    seen: set[str] = set()

    def reply(body):
        user = body["messages"][-1]["content"]
        hit = next((f for f in fails if f"question {f} " in user), None)
        if hit is not None and user not in seen:
            seen.add(user)
            return http_error(500, "overloaded")
        return judge(body)

    return reply


def make_workspace(path):
    with Store(path) as store:
        prompts = [Prompt(id=f"p{i:02d}", turns=[f"question {i} of the set"]) for i in range(PROMPTS)]
        store.put_prompts("open", prompts)
        for m in MODELS:
            store.put_answers([Answer(prompt_id=p.id, model=m, turns=[f"{m} says {i * len(m)}"])
                               for i, p in enumerate(prompts)])
    return path


def config(url, **batch):
    judge_model = {"name": "judge", "engine": "openai", "model": "judge", "base_url": url, "max_retries": 0}
    if batch:
        judge_model["batch"] = {"enabled": True, "poll_s": 0.02, **batch}
    return {"name": "b", "prompts": {"set": "open"},
            "models": [{"name": m, "engine": "imported"} for m in MODELS],
            "judge": {"kind": "llm", "name": "pj", "retries": 0, "model": judge_model},
            "audit": {"canaries": False}}


def battle(cfg, ws):
    cfg = RunConfig.model_validate(cfg)
    with Store(ws) as store:
        report = pipeline.stage_battle(cfg, store, prompts=pipeline.stage_prompts(cfg, store), show_progress=False)
        verdicts = {(j.prompt_id, j.model_a, j.model_b): (j.status, j.verdict) for j in store.get_judgments("pj")}
        return report, verdicts


def ledger(ws):
    db = sqlite3.connect(ws / "arena.db")
    try:
        return dict(db.execute("SELECT key, status FROM calls").fetchall())
    finally:
        db.close()


@pytest.fixture
def synchronous(tmp_path, batch_server):
    """The stage run one request each: its verdicts and ledger, the reference every batch run must equal."""
    _, url, _ = batch_server(judge)
    ws = make_workspace(tmp_path / "sync")
    report, verdicts = battle(config(url), ws)
    assert report.failed == 0 and len(verdicts) == PROMPTS * 3 * 2
    return verdicts, ledger(ws)


@contextmanager
def shown_tasks():
    """Collect the (description, total) of every progress task the stage opens."""
    tasks: list[tuple[str, int | None]] = []

    @contextmanager
    def display():
        yield lambda description, total: (tasks.append((description, total)), progress.no_track(description, total))[1]

    progress.show_with(display)
    try:
        yield tasks
    finally:
        progress.show_with(None)


def test_batch_mode_gives_the_synchronous_verdicts_in_several_jobs_and_no_call_twice(tmp_path, batch_server,
                                                                                     synchronous):
    verdicts, keys = synchronous
    server, url, upstream = batch_server(judge)
    ws = make_workspace(tmp_path / "batch")
    with shown_tasks() as tasks:
        cfg = RunConfig.model_validate(config(url, max_requests=50))
        with Store(ws) as store:
            report = pipeline.stage_battle(cfg, store, prompts=pipeline.stage_prompts(cfg, store))
            got = {(j.prompt_id, j.model_a, j.model_b): (j.status, j.verdict) for j in store.get_judgments("pj")}
            jobs = store.get_batches()
    assert got == verdicts and ledger(ws) == keys  # the same verdicts under the same ledger keys
    assert server.counts() == {"created": 4, "requests": 180, "duplicates": 0, "files": 8}
    assert upstream.requests == 180 and report.stats["sent"] == 180
    # one progress task per job: "judge pj: batch 2/4 batch_...", its calls as the total
    shown = sorted((d.rsplit(" ", 1)[1], n) for d, n in tasks if d.startswith("judge pj: batch "))
    assert shown == sorted((j.batch_id, j.calls) for j in jobs) and {b for b, _ in shown} == set(server.batches)
    assert sorted((j.status, j.calls, j.counts["completed"]) for j in jobs) == [("completed", 30, 30)] + [
        ("completed", 50, 50)] * 3
    # A rerun, in batch mode or not, finds every call in the ledger.
    battle(config(url, max_requests=50), ws)
    battle(config(url), ws)
    assert server.counts()["created"] == 4 and upstream.requests == 180


def test_a_stage_is_split_under_the_byte_limit_too(tmp_path, batch_server, synchronous):
    verdicts, _ = synchronous
    server, url, _ = batch_server(judge)
    ws = make_workspace(tmp_path / "bytes")
    _, got = battle(config(url, max_bytes=50_000), ws)
    with Store(ws, readonly=True) as store:
        jobs = store.get_batches()
    sizes = [len(server.contents[server.batches[j.batch_id]["input_file_id"]]) for j in jobs]
    assert got == verdicts and len(jobs) >= 4 and max(sizes) <= 50_000 and sum(j.calls for j in jobs) == 180


def test_failed_lines_are_asked_again_in_a_new_job_or_one_request_each(tmp_path, batch_server, synchronous):
    verdicts, _ = synchronous
    server, url, upstream = batch_server(flaky({"3", "7"}))
    ws = make_workspace(tmp_path / "retry")
    report, got = battle(config(url, max_requests=100), ws)
    assert got == verdicts and report.failed == 0
    # 12 lines failed in the first jobs (2 prompts x 6 games), and went again in a job of their own
    with Store(ws, readonly=True) as store:
        jobs = store.get_batches()
    assert [j.calls for j in jobs] == [100, 80, 12] and sum(j.counts["failed"] for j in jobs) == 12
    errors = sum(1 for j in jobs if j.counts["failed"])  # jobs with an error file
    assert server.counts() == {"created": 3, "requests": 192, "duplicates": 12, "files": 3 + 3 + errors}
    assert jobs[2].counts == {"total": 12, "completed": 12, "failed": 0}

    server, url, upstream = batch_server(flaky({"3"}))
    ws = make_workspace(tmp_path / "sync-retry")
    report, got = battle(config(url, failed="sync"), ws)
    assert got == verdicts and server.counts()["created"] == 1 and upstream.requests == 180 + 6
    assert report.failed == 0 and report.stats["sent"] == 186


def test_an_expired_job_keeps_what_it_finished(tmp_path, batch_server, synchronous):
    verdicts, _ = synchronous
    server, url, upstream = batch_server(judge, concurrency=1, expire_after=70)
    ws = make_workspace(tmp_path / "expired")
    report, got = battle(config(url, retries=1), ws)
    assert {k: v for k, v in got.items() if v[0] == "ok"}.items() <= verdicts.items()
    with Store(ws, readonly=True) as store:
        assert [(j.status, j.calls, j.counts["completed"]) for j in store.get_batches()] == [
            ("expired", 180, 70), ("expired", 110, 70)]
    assert server.duplicates == 0 and report.failed == 40  # retries: 1; 40 left for the next run
    assert battle(config(url, retries=0), ws)[1] == verdicts
    assert server.counts()["created"] == 3 and server.duplicates == 0
    assert set(ledger(ws).values()) == {"ok"}


def write_config(path, cfg):
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    return path


def test_a_run_killed_while_its_jobs_are_open_resumes_them_by_polling(tmp_path, batch_server, synchronous):
    verdicts, _ = synchronous
    server, url, upstream = batch_server(judge)
    ws = make_workspace(tmp_path / "killed")
    cfg = write_config(tmp_path / "b.yaml", config(url, max_requests=50))
    server.hold()
    proc = subprocess.Popen([*ARENA, "battle", str(cfg), "-w", str(ws)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while server.created < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(0.2)  # the ids stored as each creation returned
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert server.created == 4 and upstream.requests == 0
    with Store(ws, readonly=True) as store:
        jobs = store.get_batches()
        assert len(jobs) == 4 and {j.status for j in jobs} == {"open"}
    # The window between a creation and the storing of its id: the rerun finds that job by its metadata.
    db = sqlite3.connect(ws / "arena.db")
    db.execute("UPDATE batches SET batch_id = NULL WHERE id = ?", (jobs[0].id,))
    db.commit()
    db.close()
    server.release()
    report, got = battle(config(url, max_requests=50), ws)
    assert got == verdicts and report.failed == 0
    assert server.counts() == {"created": 4, "requests": 180, "duplicates": 0, "files": 8}
    with Store(ws, readonly=True) as store:
        assert {j.batch_id for j in store.get_batches()} == set(server.batches)


@pytest.mark.slow  # `arena serve` loads the bundled model
def test_a_real_model_behind_arena_serve_answers_the_same_in_batch_mode(served_model, tmp_path):
    from arena_learning.config import ModelSpec
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import CallStats, run_requests

    url, _ = served_model
    server = BatchServer(url)
    double = ThreadServer(server.app)
    questions = ["What is 2 + 3?", "What is the capital of France?", "Spell 'cat' backwards.", "What is 9 - 4?"]
    requests = [Request(messages=[{"role": "user", "content": q}]) for q in questions]
    try:
        got = {}
        for name, batch in (("sync", {}), ("batch", {"enabled": True, "poll_s": 0.05, "max_requests": 3})):
            spec = ModelSpec(name="remote", engine="openai", model="gemma-2shot", base_url=double.url,
                             params={"max_tokens": 16, "temperature": 0.0}, batch=batch)
            with Store(tmp_path / name) as store:
                stats = CallStats()
                got[name] = [c.text for c in run_requests(store, build_engine(spec), requests, stats=stats,
                                                          show_progress=False)]
                assert stats.ok == 4 and stats.tokens_out > 0
        assert got["batch"] == got["sync"] and all(got["sync"])
        assert ledger(tmp_path / "batch") == ledger(tmp_path / "sync")
        assert server.counts()["created"] == 2 and server.sent.total() == 8  # each question once per road
    finally:
        double.close()


def test_a_batch_mode_model_stays_in_this_process_under_the_ray_backend():
    # its calls go as batch jobs from the driver; an engine actor would send them one request each
    from arena_learning.config import ModelSpec, ScaleConfig
    from arena_learning.engines.openai_compat import OpenAIEngine
    from arena_learning.scale.ray_backend import RayBackend

    spec = ModelSpec(name="j", engine="openai", model="m", base_url="http://127.0.0.1:9/v1", batch={"enabled": True})
    assert isinstance(RayBackend(ScaleConfig(backend="ray"), ray=None).engine(spec), OpenAIEngine)


def test_the_call_counts_name_only_the_calls_that_stay_failed(tmp_path, batch_server):
    from arena_learning.config import ModelSpec
    from arena_learning.engines import build_engine
    from arena_learning.engines.base import Request
    from arena_learning.engines.calls import CallStats, run_requests

    server, url, _ = batch_server(flaky({"1", "2"}), concurrency=1, expire_after=6)
    requests = [Request(messages=[{"role": "user", "content": f"question {i} of the set"}]) for i in range(10)]
    spec = ModelSpec(name="m", engine="openai", model="m", base_url=url, batch={"enabled": True, "poll_s": 0.02})
    with Store(tmp_path / "ws") as store:
        stats = CallStats()
        out = run_requests(store, build_engine(spec), requests, stats=stats, show_progress=False)
    # job 1: 6 lines done (questions 1 and 2 failed: HTTP 500), 4 expired; job 2 (the retry): 6 done, none left
    assert all(c is not None for c in out) and server.created == 2
    assert (stats.ok, stats.failed, stats.sent, stats.errors) == (10, 0, 16, [])
    with Store(tmp_path / "ws2") as store:
        stats = CallStats()
        spec = spec.model_copy(update={"batch": spec.batch.model_copy(update={"retries": 0})})
        server.expire_after = 3
        out = run_requests(store, build_engine(spec), requests, stats=stats, show_progress=False)
    assert sum(c is None for c in out) == 7 and (stats.ok, stats.failed) == (3, 7)
    assert len(stats.errors) == 7 and sum("batch_expired" in e for e in stats.errors) == 7


def priced(cfg, limit=None):
    """``cfg`` with the judge priced ($2 / $8 per 1M tokens in / out; batch at half) and, given, a spend limit."""
    cfg["judge"]["model"].update(price_in=2.0, price_out=8.0)
    return {**cfg, "spend_limit": {"usd": limit}} if limit is not None else cfg


def test_batch_calls_are_priced_at_the_batch_price_and_held_under_the_spend_limit(tmp_path, batch_server):
    from arena_learning.errors import SpendLimitReached

    server, url, upstream = batch_server(judge)
    ws = make_workspace(tmp_path / "ws")
    # each of the 180 calls is held at max_tokens before its job is created: a limit below one job's bound stops
    # the stage before anything is sent, and the jobs stay recorded for the next run
    with pytest.raises(SpendLimitReached, match="spend limit reached"):
        battle(priced(config(url, max_requests=50), limit=0.0001), ws)
    assert server.counts()["created"] == 0 and upstream.requests == 0
    battle(priced(config(url, max_requests=50), limit=100.0), ws)
    assert server.counts()["created"] == 4 and server.counts()["duplicates"] == 0
    with Store(ws, readonly=True) as store:
        rows = store.spend_rows()
    (row,) = rows  # one group: the judge's batch calls of the battle stage
    assert row["batch"] and row["calls"] == 180 and row["stage"].startswith("battles")
    paid = (row["tokens_in"] * 2.0 + row["tokens_out"] * 8.0) / 1e6 * 0.5
    assert row["usd"] == pytest.approx(paid, rel=1e-9) and paid > 0
