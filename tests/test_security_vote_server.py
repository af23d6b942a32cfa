"""Attacks on `arena vote`, each on the real server on 127.0.0.1 and a real workspace: a replayed item (in turn and
in parallel), a forged voter, a voter flagged by another's controls, undo and re-read, an expired item, a rebound
Host, a cross-site text/plain POST, a negative or non-numeric Content-Length, a held-open connection, more
connections than handlers, a non-ASCII token, malformed requests; each asserts the exact status and that the store
holds exactly what it should. Then a seeded fuzz of the API that the server survives with its store exact."""

from __future__ import annotations

import json
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from arena_learning.people.quality import VoterRule
from arena_learning.people.schedule import ScheduleOptions
from arena_learning.people.server import VoteServer, VoteSettings
from arena_learning.store import Store

from .raw_http import (
    JSON,
    assert_a_foreign_host_is_refused,
    assert_a_held_connection_blocks_nobody,
    exchange,
    head,
    request,
)
from .raw_http import assert_the_guard_holds as guard_holds
from .test_votes_server import MODELS, begin, build_workspace

TOKEN = "a-token-of-at-least-22-characters"


def serve(root, **settings) -> VoteServer:
    build_workspace(root)
    return VoteServer(root, VoteSettings(**settings)).start()


def votes(root) -> list:
    with Store(root, readonly=True) as store:
        return store.get_votes(retracted=True)


def test_a_replayed_item_is_stored_once_in_turn_and_in_parallel(tmp_path):
    with serve(tmp_path) as server, httpx.Client(base_url=server.url) as ann:
        begin(ann, "ann")
        item = ann.get("/api/next").json()["item"]
        first = ann.post("/api/vote", json={"item": item, "verdict": "a"}).json()
        assert first["stored"] is True
        for verdict in ("b", "tie", "both_bad", "a"):  # the same item again, as fast or as slow as one likes
            again = ann.post("/api/vote", json={"item": item, "verdict": verdict, "seconds": 30})
            assert again.status_code == 200 and again.json() == {**first, "stored": False}
        item = ann.get("/api/next").json()["item"]
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda n: ann.post("/api/vote", json={"item": item, "verdict": "ab"[n % 2]}),
                                    range(12)))
        assert [a.status_code for a in answers] == [200] * 12
        assert sum(a.json()["stored"] for a in answers) == 1
    stored = votes(tmp_path)
    assert len(stored) == 2 and stored[0].verdict == "a" and stored[0].vote_id == first["vote_id"]


def right(shown: dict, wrong: bool = False) -> str:
    """The right verdict on a control (the real answer over an empty one, a tie on one answer twice), or a wrong one."""
    if not any(shown["left"]) or not any(shown["right"]):
        return ("a" if any(shown["left"]) else "b") if not wrong else ("b" if any(shown["left"]) else "a")
    return "a" if wrong else "tie"


def test_no_one_votes_under_another_name_nor_flags_another_voter(tmp_path):
    rule = VoterRule(fast_seconds=0.0)  # the votes of a test are quick: only the controls flag here
    with serve(tmp_path, schedule=ScheduleOptions(control_share=0.5), reveal_every=0, rule=rule) as server, \
            httpx.Client(base_url=server.url) as ann, httpx.Client(base_url=server.url) as eve:
        begin(ann, "ann")
        taken = eve.post("/api/session", json={"voter": "ann"})
        assert taken.status_code == 403 and "taken by another browser" in taken.json()["error"]
        assert eve.get("/api/next").status_code == 401  # no voter cookie: nothing to show
        eve.cookies.set(f"arena_voter_{server.port}", "forged-cookie-value")
        assert eve.get("/api/next").status_code == 401
        eve.cookies.clear()
        begin(eve, "eve")
        stolen = ann.get("/api/next").json()["item"]  # ann's item, seen by eve
        assert eve.post("/api/vote", json={"item": stolen, "verdict": "a"}).status_code == 403
        for _ in range(16):  # eve fails every control on purpose, as herself: only her figures move
            got = eve.get("/api/next").json()
            eve.post("/api/vote", json={"item": got["item"], "verdict": right(got, wrong=True)})
            mine = ann.get("/api/next").json()
            ann.post("/api/vote", json={"item": mine["item"], "verdict": right(mine)})
        assert [f["voter"] for f in eve.get("/api/summary").json()["voters"]] == ["eve"]  # her own figures only
        every = httpx.get(server.url + "api/summary", headers={"X-Arena-Organiser": server.organiser_url.split(
            "organiser=")[1]}).json()["voters"]
    by_name = {f["voter"]: f for f in every}
    assert set(by_name) == {"ann", "eve"} and by_name["ann"]["control_fails"] == 0
    assert by_name["eve"]["control_fails"] > 0 and by_name["eve"]["flagged"] and not by_name["ann"]["flagged"]
    stored = votes(tmp_path)
    assert len(stored) == 32 and sum(v.voter == "ann" for v in stored) == 16
    assert stolen not in json.dumps([v.vote_id for v in stored])


def test_an_invitation_lets_its_voter_in_and_nobody_else(tmp_path):
    with serve(tmp_path, voters=("ann", "bob")) as server, httpx.Client(base_url=server.url) as ann, \
            httpx.Client(base_url=server.url) as eve:
        assert set(server.invitations) == {"ann", "bob"}
        code = server.invitations["ann"].split("invite=")[1]
        assert ann.post("/api/session", json={"invite": code}).json()["voter"] == "ann"
        assert ann.get("/api/session").json()["voter"] == "ann"  # the browser keeps it
        with httpx.Client(base_url=server.url) as second:  # the same link in a second browser: both stay in
            assert second.post("/api/session", json={"invite": code}).json()["voter"] == "ann"
            assert second.get("/api/next").status_code == ann.get("/api/next").status_code == 200
        assert eve.post("/api/session", json={"voter": "eve"}).status_code == 403  # by invitation only
        assert eve.post("/api/session", json={"voter": "ann"}).status_code == 403
        assert eve.post("/api/session", json={"invite": code[:-2] + "xx"}).status_code == 403
        assert eve.post("/api/session", json={"invite": ["not", "text"]}).status_code == 403


def test_undo_takes_a_vote_back_and_its_item_never_comes_back_nor_names_a_model(tmp_path):
    with serve(tmp_path, schedule=ScheduleOptions(control_share=0), reveal_every=0) as server, \
            httpx.Client(base_url=server.url) as ann:
        begin(ann, "ann")
        said = []
        shown = ann.get("/api/next").json()
        voted = ann.post("/api/vote", json={"item": shown["item"], "verdict": "a"})
        undo = ann.post("/api/undo", json={"vote_id": voted.json()["vote_id"]})
        said += [shown, voted.json(), undo.json()]
        assert undo.json() == {"undone": True}
        again = ann.post("/api/vote", json={"item": shown["item"], "verdict": "b"})  # the item is used up
        assert again.json()["stored"] is False
        later = [ann.get("/api/next").json() for _ in range(40)]  # skip after skip: a new prompt each time
        said += [again.json(), *later]
        assert shown["prompt"] not in [x["prompt"] for x in later if "prompt" in x]
        assert len({json.dumps(x["prompt"]) for x in later}) == 40
        assert not any(m in json.dumps(said) for m in MODELS)
        reveal = ann.post("/api/end", json={}).json()["reveal"]
        assert reveal == []  # the undone vote is not in the session's votes
    stored = votes(tmp_path)
    assert len(stored) == 1 and stored[0].retracted and stored[0].verdict == "a"


def test_sealed_items_have_one_length_and_expire(tmp_path):
    with serve(tmp_path, schedule=ScheduleOptions(control_share=0.5), item_ttl_s=0.001) as server, \
            httpx.Client(base_url=server.url) as ann:
        begin(ann, "ann")
        items = [ann.get("/api/next").json()["item"] for _ in range(40)]
        assert len({len(i) for i in items}) == 1  # real pairs, controls, long and short names alike
        time.sleep(0.05)  # far past the item's 1 ms
        late = ann.post("/api/vote", json={"item": items[0], "verdict": "a"})
        assert late.status_code == 410 and "expired" in late.json()["error"]
    assert votes(tmp_path) == []


def test_a_foreign_host_a_cross_site_post_and_bad_lengths_are_refused_before_anything_is_stored(tmp_path):
    with serve(tmp_path) as server, httpx.Client(base_url=server.url) as ann:
        cookie = begin(ann, "ann").headers["set-cookie"].split(";")[0]
        item = ann.get("/api/next").json()["item"]
        vote = json.dumps({"item": item, "verdict": "a"}).encode()
        with_cookie = [("Cookie", cookie)]
        assert_a_foreign_host_is_refused(server.port, "GET", "/")
        guard_holds(server.port, "/api/next", "/api/vote", vote, with_cookie)
        too_big = head(server.port, "POST", "/api/vote", [JSON, ("Content-Length", "2000000"), *with_cookie])
        assert exchange(server.port, too_big)[0] == 413  # said before the two megabytes are sent
        assert exchange(server.port, head(server.port, "POST", "/api/vote", [JSON, *with_cookie]))[0] == 411
        assert request(server.port, "GET", "/", host="localhost")[0] == 200  # loopback names are the server's
        assert votes(tmp_path) == []
        assert request(server.port, "POST", "/api/vote", [JSON, *with_cookie], vote)[0] == 200  # the same, right
    assert len(votes(tmp_path)) == 1


def test_the_token_is_checked_before_the_body_and_a_non_ascii_token_is_a_403(tmp_path):
    with serve(tmp_path, token=TOKEN) as server:
        for token in (b"\xe9t\xe9", "é".encode(), b"\xff\xfe" * 20, TOKEN[:-1].encode(), b""):
            status, _, body = request(server.port, "GET", "/api/next", [("X-Arena-Token", token)])
            assert status == 403 and b"token" in body
        # the token is refused while the promised body is still unsent: it was never read
        status, _, _ = exchange(server.port, head(server.port, "POST", "/api/vote", [
            JSON, ("X-Arena-Token", "wrong"), ("Content-Length", "900")]))
        assert status == 403
        assert request(server.port, "GET", "/api/session", [("X-Arena-Token", TOKEN)])[0] == 200


def test_malformed_requests_get_a_400_never_a_dropped_connection(tmp_path):
    with serve(tmp_path) as server:
        port = server.port
        for raw in (b"GET / / / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"GET / HTTP/x.y\r\nHost: 127.0.0.1\r\n\r\n",
                    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n"):
            status, _, body = exchange(port, raw)
            assert status in (400, 431) and json.loads(body)["error"]
        assert request(port, "POST", "/api/vote", [JSON], b"{not json")[0] == 400
        status, _, body = request(port, "POST", "/api/session", [JSON], b'{"voter": "\xff"}')
        assert status == 400 and b"not JSON" in body
        assert request(port, "POST", "/api/session", [JSON], b"[" * 5000 + b"]" * 5000)[0] == 400
        assert request(port, "DELETE", "/api/vote")[0] == 405
        assert request(port, "GET", "/../../etc/passwd")[0] == 404


def test_a_held_connection_times_out_and_connections_past_the_cap_are_told_busy(tmp_path):
    with serve(tmp_path, timeout_s=0.5, max_handlers=3) as server:
        assert_a_held_connection_blocks_nobody(server.port, "/", closed_within_s=10)
    with serve(tmp_path / "capped", timeout_s=30, max_handlers=3) as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(3)]
        try:
            for sock in held:
                sock.sendall(b"GET / HTTP/1.1\r\n")  # half a request: each holds a handler
            status, _, body = request(server.port, "GET", "/")  # accepted after the three, in order
            assert status == 503 and b"too many connections" in body
        finally:
            for sock in held:
                sock.close()
        for _ in range(100):  # the handlers end as their clients go: then requests are answered again
            if request(server.port, "GET", "/")[0] == 200:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the server did not answer once the held connections closed")


def _shape(rng: random.Random, depth: int = 0):
    """A random JSON value: what a hostile client might send in place of the page's fields."""
    kind = rng.randrange(7 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False, 0, -1, 1e308, 2 ** 70, 0.5])
    if kind == 2:
        return "".join(rng.choice("aZ9-_=é\u202e\x00<>\"'") for _ in range(rng.randrange(0, 120)))
    if kind == 3:
        return rng.choice(["a", "b", "tie", "both_bad", "ann", "x" * 81])
    if kind == 4:
        return "gAAAAA" + "".join(rng.choice("ABCdef012-_") for _ in range(rng.randrange(100, 400)))
    if kind == 5:
        return [_shape(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["item", "verdict", "voter", "vote_id", "seconds", "invite", "x"]
    return {rng.choice(keys): _shape(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_a_seeded_fuzz_of_the_api_leaves_the_server_up_and_the_store_exact(tmp_path):
    rng = random.Random(20261207)
    with serve(tmp_path, timeout_s=2.0, reveal_every=7) as server, httpx.Client(base_url=server.url) as ann:
        port = server.port
        cookie = begin(ann, "ann").headers["set-cookie"].split(";")[0]
        accepted: set[str] = set()
        used: list[str] = []
        statuses = []
        deadline = time.monotonic() + 240
        for n in range(300):
            assert time.monotonic() < deadline, f"the fuzz took too long ({n} requests)"
            roll = rng.random()
            if roll < 0.2:  # the page's own vote, now and then on an item already used
                shown = ann.get("/api/next").json()
                item = rng.choice(used) if used and rng.random() < 0.3 else shown.get("item")
                res = ann.post("/api/vote", json={"item": item, "verdict": rng.choice(["a", "b", "tie", "x"]),
                                                  "seconds": _shape(rng)})
                statuses.append(res.status_code)
                if res.status_code == 200:
                    used.append(item)
                    if res.json()["stored"]:
                        accepted.add(res.json()["vote_id"])
                continue
            path = rng.choice(["/api/vote", "/api/undo", "/api/session", "/api/end", "/api/next", "/api/summary",
                               "/", "/api/nope", "/vote.js"])
            method = rng.choice(["POST", "POST", "GET", "PUT", "OPTIONS"])
            body = json.dumps(_shape(rng)).encode() if rng.random() < 0.8 else bytes(rng.randrange(256) for _ in
                                                                                   range(rng.randrange(200)))
            if rng.random() < 0.1:
                body += b" " * rng.choice([100, 17_000])
            headers = [("Content-Type", rng.choice(["application/json", "application/json; charset=utf-8",
                                                    "text/plain", "", "application/jsonx"]))]
            if rng.random() < 0.7:
                headers.append(("Cookie", rng.choice([cookie, cookie + "x", "a=b; c", "\x7f=\x01", cookie])))
            if rng.random() < 0.2:
                headers.append(("X-Arena-Token", bytes(rng.randrange(32, 256) for _ in range(rng.randrange(40)))))
            length = rng.choice([None, None, None, "-1", "abc", "", str(len(body) // 2)])
            host = rng.choice([None, None, None, "evil.example", "", "[::1]", "localhost:1"])
            status, _, _ = request(port, method, path, headers, body, host=host, length=length)
            statuses.append(status)
        assert all(200 <= s < 300 or 400 <= s < 500 for s in statuses), sorted(set(statuses))
        assert len(accepted) >= 10 and any(400 <= s < 500 for s in statuses)
        assert request(port, "GET", "/")[0] == 200  # still up
    stored = votes(tmp_path)
    assert {v.vote_id for v in stored} == accepted and len(stored) == len(accepted)


@pytest.mark.parametrize("name", ["", " ", "x" * 81, "tab\tname", None, 7, ["ann"]])
def test_a_bad_voter_name_is_a_400_that_says_what_to_give(tmp_path, name):
    with serve(tmp_path) as server:
        status, _, body = request(server.port, "POST", "/api/session", [JSON], json.dumps({"voter": name}).encode())
        assert status == 400 and b"1 to 80 characters" in body


def test_a_bad_voter_list_or_a_short_token_stops_arena_vote_before_it_listens(tmp_path):
    from typer.testing import CliRunner

    from arena_learning.cli import app

    build_workspace(tmp_path / "ws", 4)
    (tmp_path / "twice.txt").write_text("ann\n# the team\nann\n", encoding="utf-8")
    runner = CliRunner()
    twice = runner.invoke(app, ["vote", str(tmp_path / "ws"), "--voters", str(tmp_path / "twice.txt")])
    assert twice.exit_code == 2 and "one name a line, each once" in twice.output
    short = runner.invoke(app, ["vote", str(tmp_path / "ws"), "--token", "s3cret"])
    assert short.exit_code == 2 and "at least 22 characters" in short.output
