"""The vote server over real HTTP (httpx): models never reach the page before the voter's session ends, a token
guards other addresses, a vote waits while a run holds the workspace and is stored once when resent, and 200 votes
of two voters at once survive the server killed and restarted between votes. The attacks are in
test_security_vote_server.py."""

from __future__ import annotations

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
from arena_learning.people.server import VoteServer, VoteSettings, server_token
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


def begin(client: httpx.Client, name: str) -> httpx.Response:
    """Start voting as ``name``: the client keeps the voter cookie the server sets."""
    res = client.post("/api/session", json={"voter": name})
    assert res.status_code == 200, res.text
    return res


def test_the_page_never_receives_a_model_name_before_the_session_ends(tmp_path):
    build_workspace(tmp_path)
    settings = VoteSettings(schedule=ScheduleOptions(control_share=0.5), reveal_every=12)
    with VoteServer(tmp_path, settings).start() as server, httpx.Client(base_url=server.url) as client:
        page = client.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        started = begin(client, "ann")
        cookie = started.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        said, prompts = [started.text, client.get("/api/session").text], []
        for n in range(12):
            got = client.get("/api/next")
            said.append(got.text)
            item = got.json()
            k = item["prompt"][0].split()[1]
            prompts.append(k)
            assert item["prompt"] == [f"question {k}", f"and then {k}?"] and len(item["left"]) == 2
            done = post(client, "/api/vote", {"item": item["item"], "verdict": "tie", "seconds": 0.5})
            assert done.status_code == 200 and done.json()["stored"] is True
            if n < 11:
                said.append(done.text)
                said.append(client.get("/api/summary").text)
        assert not any(m in text for text in said for m in MODELS)  # every answer of the session
        assert len(set(prompts)) == 12  # a session never shows a prompt twice
        reveal = done.json()["reveal"]  # the 12th vote ends the session: its real pairs, named
        assert reveal and all({r["left"], r["right"]} <= set(MODELS) for r in reveal)
        again = post(client, "/api/vote", {"item": item["item"], "verdict": "a"})
        assert again.json()["stored"] is False  # a resubmission counts once
        assert again.json()["vote_id"] == done.json()["vote_id"]
        undo = post(client, "/api/undo", {"vote_id": done.json()["vote_id"]})
        assert undo.json() == {"undone": True}
        summary = client.get("/api/summary").json()
        assert [f["voter"] for f in summary["voters"]] == ["ann"] and summary["voters"][0]["votes"] == 11
    with Store(tmp_path, readonly=True) as store:
        votes = store.get_votes()
    assert len(votes) == 11 and {v.session for v in votes} == {0}
    assert all(0 <= v.seconds <= 0.5 for v in votes)  # the server's measure, or the page's when less
    assert sum(v.control is not None for v in votes) >= 4


def test_a_token_is_made_beyond_loopback_and_a_token_given_is_checked(tmp_path):
    build_workspace(tmp_path, 4)
    assert server_token("127.0.0.1", None) is None
    made = server_token("0.0.0.0", None)
    assert made is not None and len(made) >= 22 and made != server_token("10.0.0.5", None)
    with pytest.raises(ArenaError, match="at least 22 characters"):
        VoteServer(tmp_path, VoteSettings(token="s3cret-token"))
    token = "a-token-of-at-least-22-chars"
    with VoteServer(tmp_path, VoteSettings(token=token)).start() as server:
        assert server.url.endswith(f"#token={token}")
        base = server.url.split("#")[0]
        assert httpx.get(base + "api/next").status_code == 403
        with httpx.Client(base_url=base, headers={"X-Arena-Token": token}) as client:
            begin(client, "ann")
            assert client.get("/api/next").status_code == 200


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
        begin(client, "ann")
        item = client.get("/api/next").json()
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            body = {"item": item["item"], "verdict": "b"}
            busy = post(client, "/api/vote", body)
            assert busy.status_code == 503 and busy.json()["busy"] and "sent again" in busy.json()["error"]
            assert str(os.getpid()) not in busy.text and str(tmp_path) not in busy.text
            assert socket.gethostname() not in busy.text
        finally:
            holder.communicate("\n", timeout=30)
        stored = post(client, "/api/vote", body).json()
        assert stored["stored"] is True
    with Store(tmp_path, readonly=True) as store:
        assert [v.vote_id for v in store.get_votes()] == [stored["vote_id"]]


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
            retry(lambda: client.post("/api/session", json={"voter": name}))
            for n in range(100):
                item = retry(lambda: client.get("/api/next")).json()
                with lock:
                    count[0] += 1
                    if count[0] in kill_at:  # between two votes: this voter's item was shown by the old server
                        server.kill()
                        server.start()
                body = {"item": item["item"], "verdict": "ab"[n % 2]}
                res = retry(lambda body=body: client.post("/api/vote", json=body))
                assert res.status_code == 200, res.text
                sent[name].append(res.json()["vote_id"])

    threads = [threading.Thread(target=voter, args=(name,)) for name in sent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    server.kill()
    with Store(tmp_path, readonly=True) as store:
        ids = [v.vote_id for v in store.get_votes()]
        voters = [v.voter for v in store.get_votes()]
    assert len(ids) == len(set(ids)) == 200
    assert sorted(ids) == sorted(sent["ann"] + sent["bob"])
    assert voters.count("ann") == 100
