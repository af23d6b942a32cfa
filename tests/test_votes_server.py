"""The vote server over real HTTP (httpx): models never reach the page before a vote, a token guards other
addresses, a vote waits while a run holds the workspace and is stored once when resent, and 200 votes of two
voters at once survive the server killed and restarted between votes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from arena_learning.errors import ArenaError
from arena_learning.people.schedule import ScheduleOptions
from arena_learning.people.server import VoteServer, VoteSettings
from arena_learning.records import Answer, Prompt
from arena_learning.store import Store

SRC = Path(__file__).resolve().parents[1] / "src"
MODELS = ["north-7b", "south-13b", "east-3b", "west-70b"]


def build_workspace(root: Path, n_prompts: int = 60) -> None:
    """Prompts of two turns and every model's answers; no text names a model."""
    with Store(root) as store:
        store.put_prompts("test", [Prompt(id=f"q{k}", turns=[f"question {k}", f"and then {k}?"],
                                          category="math" if k % 2 else "code") for k in range(n_prompts)])
        store.put_answers([Answer(prompt_id=f"q{k}", model=m, turns=[f"answer {k}.{n}", f"more {k}.{n}"])
                           for k in range(n_prompts) for n, m in enumerate(MODELS)])


def post(client: httpx.Client, path: str, body: dict) -> httpx.Response:
    return client.post(path, json=body)


def test_the_page_never_receives_a_model_name_before_the_vote(tmp_path):
    build_workspace(tmp_path)
    with VoteServer(tmp_path, VoteSettings(schedule=ScheduleOptions(control_share=0.5))).start() as server, \
            httpx.Client(base_url=server.url) as client:
        page = client.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        for n in range(12):
            got = client.get("/api/next", params={"voter": "ann"})
            assert got.status_code == 200 and not any(m in got.text for m in MODELS)
            item = got.json()
            k = item["prompt"][0].split()[1]
            assert item["prompt"] == [f"question {k}", f"and then {k}?"] and len(item["left"]) == 2
            done = post(client, "/api/vote", {"item": item["item"], "verdict": "tie", "voter": "ann",
                                              "vote_id": f"ann-vote-{n:04d}", "seconds": 0.5})
            assert done.status_code == 200 and done.json()["stored"] is True
            assert {done.json()["left"], done.json()["right"]} <= {*MODELS, "(an empty answer)"}
        again = post(client, "/api/vote", {"item": item["item"], "verdict": "a", "voter": "ann",
                                           "vote_id": "ann-vote-0011"})
        assert again.json()["stored"] is False  # a resubmission counts once
        stolen = post(client, "/api/vote", {"item": item["item"], "verdict": "a", "voter": "bob",
                                            "vote_id": "bob-vote-0001"})
        assert stolen.status_code == 400 and "another voter" in stolen.json()["error"]
        forged = post(client, "/api/vote", {"item": item["item"][:-4] + "AAAA", "verdict": "a", "voter": "ann",
                                            "vote_id": "ann-vote-0099"})
        assert forged.status_code == 400
        undo = post(client, "/api/undo", {"vote_id": "ann-vote-0011", "voter": "ann"})
        assert undo.json() == {"undone": True}
        summary = client.get("/api/summary").json()
        assert summary["voters"][0]["voter"] == "ann" and summary["voters"][0]["votes"] == 11
    with Store(tmp_path, readonly=True) as store:
        votes = store.get_votes()
    assert len(votes) == 11 and {v.seconds for v in votes} == {0.5}  # the page's time on screen, within the server's
    assert sum(v.control is not None for v in votes) >= 4


def test_other_addresses_need_a_token_and_a_token_is_checked(tmp_path):
    build_workspace(tmp_path, 4)
    with pytest.raises(ArenaError, match="--token"):
        VoteServer(tmp_path, VoteSettings(host="0.0.0.0"))
    with VoteServer(tmp_path, VoteSettings(token="s3cret-token")).start() as server:
        assert server.url.endswith("#token=s3cret-token")
        assert httpx.get(server.url.split("#")[0] + "api/next?voter=ann").status_code == 403
        ok = httpx.get(server.url.split("#")[0] + "api/next?voter=ann", headers={"X-Arena-Token": "s3cret-token"})
        assert ok.status_code == 200


HOLD = """
import sys, time
from arena_learning.store import Store
with Store(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_vote_waits_while_a_run_holds_the_workspace_and_is_stored_when_sent_again(tmp_path):
    build_workspace(tmp_path, 4)
    settings = VoteSettings(wait_s=0.6)
    with VoteServer(tmp_path, settings).start() as server, httpx.Client(base_url=server.url) as client:
        item = client.get("/api/next", params={"voter": "ann"}).json()
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            body = {"item": item["item"], "verdict": "b", "voter": "ann", "vote_id": "ann-busy-0001"}
            busy = post(client, "/api/vote", body)
            assert busy.status_code == 503 and busy.json()["busy"] and "sent again" in busy.json()["error"]
        finally:
            holder.communicate("\n", timeout=30)
        assert post(client, "/api/vote", body).json()["stored"] is True
    with Store(tmp_path, readonly=True) as store:
        assert [v.vote_id for v in store.get_votes()] == ["ann-busy-0001"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``arena vote`` in its own process, killed with SIGKILL as a crash would."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, _free_port(), None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "arena_learning", "vote", str(self.root), "--port",
                                      str(self.port)], env={**os.environ, "PYTHONPATH": str(SRC)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("the vote server did not start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def test_200_votes_of_two_voters_survive_the_server_killed_between_votes(tmp_path):
    build_workspace(tmp_path)
    server = Server(tmp_path)
    server.start()
    sent: dict[str, list[str]] = {"ann": [], "bob": []}
    kill_at = {60, 130}
    lock = threading.Lock()
    count = [0]

    def retry(call):
        while True:  # the page's retry: the same request again until the server answers
            try:
                res = call()
                if res.status_code == 503:
                    raise httpx.TransportError("busy")
                return res
            except httpx.TransportError:
                time.sleep(0.1)

    def voter(name: str) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
            for n in range(100):
                item = retry(lambda: client.get("/api/next", params={"voter": name})).json()
                with lock:
                    count[0] += 1
                    if count[0] in kill_at:  # between two votes: this voter's item was shown by the old server
                        server.kill()
                        server.start()
                body = {"item": item["item"], "verdict": "ab"[n % 2], "voter": name, "vote_id": f"{name}-{n:05d}"}
                res = retry(lambda body=body: client.post("/api/vote", json=body))
                assert res.status_code == 200, res.text
                sent[name].append(body["vote_id"])

    threads = [threading.Thread(target=voter, args=(name,)) for name in sent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    server.kill()
    with Store(tmp_path, readonly=True) as store:
        ids = [v.vote_id for v in store.get_votes()]
    assert len(ids) == len(set(ids)) == 200
    assert sorted(ids) == sorted(sent["ann"] + sent["bob"])
    assert json.dumps(ids).count("ann-") == 100
