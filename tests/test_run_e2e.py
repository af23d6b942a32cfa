"""End to end on the bundled model: `arena run`, reruns, and a run killed mid-answer."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from .conftest import ARENA, write_config
from .conftest import arena as run_arena

pytestmark = pytest.mark.slow

CONFIG = """
name: e2e
tasks: {n: 27, seed: 5}
models:
  - name: zero
    engine: llamacpp
    model: bundled
    mode: completion
    params: {max_tokens: 12, stop: ["\\n"]}
  - name: two
    engine: llamacpp
    model: bundled
    mode: completion
    prompt_format: {few_shot: [["What is 12 + 7?", "19"], ["What is the capital of Japan?", "Tokyo"]]}
    params: {max_tokens: 12, stop: ["\\n"]}
  - name: four
    engine: llamacpp
    model: bundled
    mode: completion
    prompt_format:
      few_shot: [["What is 12 + 7?", "19"], ["What is the capital of Japan?", "Tokyo"],
                 ["How many minutes are in 3 hours?", "180"], ["Spell the word 'dog' backwards.", "god"]]
    params: {max_tokens: 12, stop: ["\\n"]}
ratings: {bootstrap: 20}
"""
TOTAL_CALLS = 27 * 3


def arena(*args, check=True):
    proc = run_arena(*args)  # in this process; the kill below runs one of its own
    if check and proc.returncode != 0:
        raise AssertionError(f"arena {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def ledger(ws):
    db = sqlite3.connect(ws / "arena.db")
    try:
        return db.execute("SELECT key, status, attempts, updated_at FROM calls ORDER BY key").fetchall()
    finally:
        db.close()


def battles(ws):
    db = sqlite3.connect(ws / "arena.db")
    try:
        rows = db.execute("SELECT prompt_id, model_a, model_b, data FROM battles ORDER BY 1, 2, 3").fetchall()
        return [(p, a, b, json.loads(d)["outcome"]) for p, a, b, d in rows]
    finally:
        db.close()


def answer_stats(ws):
    db = sqlite3.connect(ws / "arena.db")
    try:
        return json.loads(db.execute("SELECT value FROM meta WHERE key='answer_stats'").fetchone()[0])
    finally:
        db.close()


@pytest.fixture(scope="module")
def finished_run(module_tmp):
    root = module_tmp
    cfg = write_config(root / "run.yaml", CONFIG)
    ws = root / "ws"
    proc = arena("run", cfg, "-w", ws, "--json")
    return cfg, ws, proc


def test_run_prints_a_leaderboard_as_json(finished_run):
    cfg, ws, proc = finished_run
    board = json.loads(proc.stdout)
    assert sorted(r["model"] for r in board) == ["four", "two", "zero"]
    assert all(r["battles"] == 2 * 27 for r in board)
    assert all(r["wins"] + r["losses"] + r["ties"] == r["battles"] for r in board)
    assert sum(r["wins"] for r in board) == sum(r["losses"] for r in board)
    assert [r["rating"] for r in board] == sorted((r["rating"] for r in board), reverse=True)
    assert (ws / "config.resolved.yaml").is_file()
    assert "<h2>Leaderboard</h2>" in (ws / "report.html").read_text()
    # The leaderboard command reads the same workspace and agrees.
    again = json.loads(arena("leaderboard", ws, "--json").stdout)
    assert again == board


def test_rerun_of_a_finished_run_makes_no_model_call(finished_run):
    cfg, ws, _ = finished_run
    before = ledger(ws)
    assert len(before) == TOTAL_CALLS and {r[1] for r in before} == {"ok"}
    arena("run", cfg, "-w", ws)
    assert ledger(ws) == before
    stats = answer_stats(ws)
    assert sum(s["sent"] for s in stats.values()) == 0
    assert sum(s["cached"] for s in stats.values()) == TOTAL_CALLS


def test_run_killed_mid_answer_resumes_without_repeating_work(finished_run, tmp_path):
    cfg, ws_full, _ = finished_run
    ws = tmp_path / "killed"
    proc = subprocess.Popen([*ARENA, "run", str(cfg), "-w", str(ws)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ})
    deadline = time.time() + 300
    done = 0
    while time.time() < deadline and proc.poll() is None:
        try:
            done = len(ledger(ws))
        except sqlite3.Error:
            done = 0
        if done >= 30:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {r[0]: r for r in ledger(ws)}
    assert 30 <= len(before) < TOTAL_CALLS, "the kill should land in the middle of answering"

    arena("run", cfg, "-w", ws)
    after = ledger(ws)
    assert len(after) == TOTAL_CALLS and all(r[1] == "ok" and r[2] == 1 for r in after)
    # Every success from before the kill is untouched and was served from the ledger, not sent again.
    assert all(before[k] == r for k, *_ in after for r in [next(x for x in after if x[0] == k)] if k in before)
    stats = answer_stats(ws)
    assert sum(s["cached"] for s in stats.values()) == len(before)
    assert sum(s["sent"] for s in stats.values()) == TOTAL_CALLS - len(before)
    assert battles(ws) == battles(ws_full)


def test_leaderboard_with_style_control(finished_run):
    _, ws, proc = finished_run
    out = json.loads(arena("leaderboard", ws, "--style-control", "--json").stdout)
    plain = {r["model"]: r["rating"] for r in json.loads(proc.stdout)}
    assert {r["model"] for r in out["ratings"]} == set(plain)
    assert all(r["rating"] == pytest.approx(plain[r["model"]], abs=1e-6) for r in out["ratings"])
    assert set(out["style_coefficients"]) == {"length", "headers", "lists", "bold"}
    assert all(r["delta"] == pytest.approx(r["rating_controlled"] - r["rating"]) for r in out["ratings"])


def test_win_rates_and_online_elo(finished_run):
    _, ws, proc = finished_run
    out = json.loads(arena("winrates", ws, "--anchor", "zero", "--json").stdout)
    models, p = out["models"], out["predicted"]
    assert sorted(models) == ["four", "two", "zero"]
    for i in range(3):
        assert p[i][i] == pytest.approx(0.5)
        for j in range(3):
            assert p[i][j] + p[j][i] == pytest.approx(1.0)
            if i != j:
                assert out["games"][i][j] == 27 and 0.0 <= out["observed"][i][j] <= 1.0
                assert out["observed"][i][j] + out["observed"][j][i] == pytest.approx(1.0)
    assert out["win_rate_vs_anchor"]["zero"] == pytest.approx(0.5)
    ratings = {r["model"]: r["rating"] for r in json.loads(proc.stdout)}
    best = max(ratings, key=ratings.get)
    assert out["win_rate_vs_anchor"][best] == max(out["win_rate_vs_anchor"].values())
    assert set(out["online_elo"]) == set(models)
