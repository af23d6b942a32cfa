"""Offline batch files: `arena batch export` writes the calls a stage would still send, another process answers the
file alone (as `vllm run-batch` does: tests/batch_server.py --run-file), `arena batch import` reads the replies into
the ledger, and the run that follows sends nothing and ends on the synchronous run's leaderboard."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from arena_learning.store import Store

from .conftest import REPO, Reply, arena, fenced, write_config


def model_server(body):
    """Every model of the config on one scripted server: contestants answer by a hash of the question, the judge
    scores each answer by a hash of its text."""
    user = body["messages"][-1]["content"]
    if body["model"] != "judge":
        return Reply(f"{body['model']}: {int(hashlib.sha256(user.encode()).hexdigest(), 16) % 97}", usage=(30, 8))

    def score(name):
        return int(hashlib.sha256(((fenced(user, name) or "") + name).encode()).hexdigest(), 16) % 10 + 1

    return Reply(json.dumps({"explanation": "scored", "score_a": score("ANSWER A"), "score_b": score("ANSWER B")}),
                 usage=(len(user) // 4, 12))


CONFIG = """
name: offline
tasks: {{n: 18, suite: 2}}
models:
  - {{name: alpha, engine: openai, model: alpha, base_url: "{url}", max_retries: 0}}
  - {{name: beta, engine: openai, model: beta, base_url: "{url}", max_retries: 0}}
  - {{name: gamma, engine: openai, model: gamma, base_url: "{url}", max_retries: 0}}
judge:
  kind: llm
  name: offline-judge
  template: pairwise
  model: {{name: judge, engine: openai, model: judge, base_url: "{url}", max_retries: 0}}
ratings: {{bootstrap: 20}}
"""


def run_file(url, requests, out):
    """Answer ``requests`` into ``out`` in another process, from the file alone."""
    subprocess.run([sys.executable, str(REPO / "tests" / "batch_server.py"), "--upstream", url, "--run-file",
                    str(requests), str(out)], check=True, timeout=120)


def lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def server(scripted_server):
    return scripted_server(model_server)


def test_export_run_elsewhere_import_gives_the_synchronous_leaderboard_with_nothing_sent(tmp_path, server):
    cfg = write_config(tmp_path / "offline.yaml", CONFIG.format(url=server.url))
    sync = arena("run", cfg, "-w", tmp_path / "sync", "--json")
    assert sync.returncode == 0, sync.stderr
    sent_sync = server.requests
    ws = tmp_path / "ws"

    ran = arena("batch", "export", cfg, "-w", ws, "--stage", "answers", "--out", tmp_path / "answers.jsonl")
    assert ran.returncode == 0, ran.stderr
    requests = lines(tmp_path / "answers.jsonl")
    assert len(requests) == 18 * 3 and server.requests == sent_sync  # exported, not sent
    assert {r["url"] for r in requests} == {"/v1/chat/completions"} and {r["method"] for r in requests} == {"POST"}
    assert {r["body"]["model"] for r in requests} == {"alpha", "beta", "gamma"}
    assert "alpha: 18 calls" in ran.stderr and "arena batch import" in ran.stderr
    with Store(ws, readonly=True) as store:  # recorded in the workspace, nothing in the ledger yet
        assert [(b.model, b.status, b.calls) for b in store.get_batches()] == [
            ("alpha", "exported", 18), ("beta", "exported", 18), ("gamma", "exported", 18)]
        assert store.call_counts() == {}
    run_file(server.url, tmp_path / "answers.jsonl", tmp_path / "answers.out.jsonl")
    ran = arena("batch", "import", tmp_path / "answers.out.jsonl", "-w", ws)
    assert ran.returncode == 0 and "54 replies kept, 0 failed calls" in ran.stderr, ran.stderr
    # every answer call is in the ledger now: a second export of the stage writes nothing
    ran = arena("batch", "export", cfg, "-w", ws, "--stage", "answers", "--out", tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_text() == "" and "nothing to export" in ran.stderr

    ran = arena("batch", "export", cfg, "-w", ws, "--stage", "battles", "--out", tmp_path / "battles.jsonl",
                "--model", "judge")
    assert ran.returncode == 0, ran.stderr
    judged = lines(tmp_path / "battles.jsonl")
    assert len(judged) == 18 * 3 * 2 and {r["body"]["model"] for r in judged} == {"judge"}  # both orders
    run_file(server.url, tmp_path / "battles.jsonl", tmp_path / "battles.out.jsonl")
    ran = arena("batch", "import", tmp_path / "battles.out.jsonl", "-w", ws)
    assert ran.returncode == 0, ran.stderr

    before = server.requests
    offline = arena("run", cfg, "-w", ws, "--json")
    assert offline.returncode == 0, offline.stderr
    assert server.requests == before  # every call came from the ledger
    assert json.loads(offline.stdout) == json.loads(sync.stdout)


def test_a_line_that_does_not_parse_is_reported_and_nothing_else_is_lost(tmp_path, server):
    cfg = write_config(tmp_path / "offline.yaml", CONFIG.format(url=server.url))
    ws = tmp_path / "ws"
    assert arena("batch", "export", cfg, "-w", ws, "--stage", "answers", "--out", tmp_path / "a.jsonl",
                 "--model", "beta").returncode == 0
    assert len(lines(tmp_path / "a.jsonl")) == 18
    run_file(server.url, tmp_path / "a.jsonl", tmp_path / "out.jsonl")
    text = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    cut = json.loads(text[1])["custom_id"]
    text[1] = text[1][:150]  # a line cut off after its custom_id
    text.append(json.dumps({"id": "x", "custom_id": "0" * 64, "response": {"status_code": 200, "body": {}},
                            "error": None}))  # a reply to a call never exported
    text.insert(5, json.dumps({"id": "y", "custom_id": json.loads(text[5])["custom_id"], "response": None,
                               "error": {"code": "server_error", "message": "the GPU fell over"}}))
    (tmp_path / "out.jsonl").write_text("\n".join(text) + "\n", encoding="utf-8")
    ran = arena("batch", "import", tmp_path / "out.jsonl", "-w", ws)
    flat = " ".join(ran.stderr.split())  # the console wraps long lines
    assert ran.returncode == 1
    assert f"out.jsonl:2: custom_id {cut}: not JSON" in flat, ran.stderr
    assert f"out.jsonl:20: custom_id {'0' * 64}: no exported call" in flat
    assert "17 replies kept, 1 failed calls" in flat and "line 6" in flat and "the GPU fell over" in flat
    with Store(ws, readonly=True) as store:
        assert store.call_counts() == {"ok": 17}  # the error line came before that call's reply: the reply stands
    # the next export asks exactly the call whose line was lost
    assert arena("batch", "export", cfg, "-w", ws, "--stage", "answers", "--out", tmp_path / "b.jsonl",
                 "--model", "beta").returncode == 0
    assert [r["custom_id"] for r in lines(tmp_path / "b.jsonl")] == [cut]


def test_an_adaptive_schedule_exports_round_by_round_until_nothing_is_left(tmp_path, server):
    cfg = write_config(tmp_path / "adaptive.yaml", CONFIG.format(url=server.url) + (
        "battles: {schedule: adaptive, budget: 24, batch_size: 8}\naudit: {canaries: false}\n"))
    sync = arena("run", cfg, "-w", tmp_path / "sync", "--json")
    assert sync.returncode == 0, sync.stderr
    ws = tmp_path / "ws"
    sizes: list[int] = []
    while not sizes or sizes[-1]:
        assert len(sizes) < 10, f"the exports do not end: {sizes}"
        stage = "answers" if not sizes else "battles"
        out = tmp_path / f"{len(sizes)}.jsonl"
        assert arena("batch", "export", cfg, "-w", ws, "--stage", stage, "--out", out).returncode == 0
        sizes.append(len(lines(out)))
        if sizes[-1]:
            run_file(server.url, out, tmp_path / "out.jsonl")
            assert arena("batch", "import", tmp_path / "out.jsonl", "-w", ws).returncode == 0
    # 54 answers; then the budget's 24 battles (both orders: 48 verdicts) a round at a time, each round chosen on
    # the verdicts before it
    assert sizes[0] == 54 and sum(sizes[1:]) == 48 and len(sizes) >= 5 and all(0 < n <= 16 for n in sizes[1:-1])
    before = server.requests
    offline = arena("run", cfg, "-w", ws, "--json")
    assert server.requests == before and json.loads(offline.stdout) == json.loads(sync.stdout)
