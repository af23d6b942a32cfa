"""The vote page in a real browser (headless Chromium, as the report's browser tests drive it): two voters vote
with key presses and clicks, the server is stopped and started again between votes, a reload resumes, undo takes
a vote back, ending the session names the models; the votes land once each, no model name reaches the page before
the session ends, hostile answers stay inert, and the console stays clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_learning.people.schedule import ScheduleOptions
from arena_learning.people.server import VoteServer, VoteSettings
from arena_learning.records import Answer, Prompt
from arena_learning.store import Store
from tests.test_report_browser import HOSTILE_ANSWERS, Page, browser, chromium  # noqa: F401  (fixtures used by name)

MODELS = ["north-7b", "south-13b", "east-3b", "west-70b"]


def build_workspace(root: Path, hostile_every: int = 3, n_prompts: int = 20) -> None:
    with Store(root) as store:
        store.put_prompts("test", [Prompt(id=f"q{k}", turns=[f"question {k}", "<b>and</b> then?"])
                                   for k in range(n_prompts)])
        store.put_answers([Answer(prompt_id=f"q{k}", model=m,
                                  turns=[HOSTILE_ANSWERS[(k + n) % len(HOSTILE_ANSWERS)] if (k + n) % hostile_every == 0
                                         else f"answer {k}.{n}", f"more {k}.{n}"])
                           for k in range(n_prompts) for n, m in enumerate(MODELS)])


class Voter:
    """One person's page: votes by key or click and waits until the page says it was stored."""

    def __init__(self, browser, url: str, name: str, bypass_csp: bool = False):  # noqa: F811  (the fixture)
        self.p = Page(browser, bypass_csp=bypass_csp)
        self.responses: list[str] = []  # every answer of the API, read before the session ends
        self.p.page.on("response", lambda r: self.responses.append(r.text()) if "/api/" in r.url else None)
        self.page = self.p.open(url)
        self.page.wait_for_selector("body[data-state='need-name']")
        self.page.fill("#voter", name)
        self.page.press("#voter", "Enter")
        self.page.wait_for_selector("body[data-state='ready']")
        self.stored = 0

    def vote(self, how: str) -> None:
        if how.startswith("#"):
            self.page.click(how)
        else:
            self.page.keyboard.press(how)
        self.stored += 1
        self.page.wait_for_selector(f"body[data-stored='{self.stored}'][data-state='ready']", timeout=15000)


def test_two_voters_vote_by_key_and_click_through_a_restart_a_reload_and_an_undo(tmp_path, browser):  # noqa: F811
    build_workspace(tmp_path)
    settings = VoteSettings(schedule=ScheduleOptions(control_share=0.25))
    server = VoteServer(tmp_path, settings).start()
    settings.port = server.port
    url = server.url
    ann, bob = Voter(browser, url, "ann"), Voter(browser, url, "bob")
    try:
        presses = ["1", "2", "3", "4", "a", "b", "t", "x", "#vote-a", "#vote-b", "#vote-tie", "#vote-bad"]
        for n, how in enumerate(presses):
            if n == 6:  # the server dies between votes; the items on screen were shown by the old one
                server.close()
                server = VoteServer(tmp_path, settings).start()
            ann.vote(how)
            bob.vote(presses[-1 - n])
        assert "shown when your session ends" in ann.page.text_content("#status")
        ann.page.keyboard.press("s")  # skip: a new item, nothing stored
        ann.page.wait_for_selector("body[data-state='ready']")
        ann.page.keyboard.press("u")  # undo the last stored vote: taken back, its item does not come back
        ann.page.wait_for_selector("#status:text('Undone')")
        ann.vote("3")
        ann.page.reload()  # a reload resumes: the voter is the browser's cookie, the count is the store's
        ann.page.wait_for_selector("body[data-state='ready']")
        assert ann.page.get_attribute("#count", "data-count") == "12"
        assert ann.page.input_value("#voter") == "ann"
        seen = "".join(ann.responses + bob.responses)
        assert ann.responses and not any(m in seen for m in MODELS)  # no model name before the session ends
        ann.page.keyboard.press("e")  # end the session: its votes, named
        ann.page.wait_for_selector("body[data-revealed='1']")
        assert any(m in ann.page.text_content("#revealed") for m in MODELS)
        for v in (ann, bob):
            assert v.page.evaluate("typeof window.__pwned") == "undefined"
            assert v.p.errors == []
    finally:
        ann.p.close()
        bob.p.close()
        server.close()
    with Store(tmp_path, readonly=True) as store:
        votes = store.get_votes()
        retracted = [v for v in store.get_votes(retracted=True) if v.retracted]
    assert len(votes) == 24 and len({v.vote_id for v in votes}) == 24 and len(retracted) == 1
    assert sorted(v.verdict for v in votes if v.voter == "bob") == sorted(["a", "b", "tie", "both_bad"] * 3)
    assert {v.voter for v in votes} == {"ann", "bob"} and all(v.seconds >= 0 for v in votes)


def test_an_invitation_link_lets_its_voter_in_and_the_organisers_page_shows_every_voter(tmp_path, browser):  # noqa: F811
    build_workspace(tmp_path)
    settings = VoteSettings(voters=("ann", "bob"), schedule=ScheduleOptions(control_share=0))
    with VoteServer(tmp_path, settings).start() as server:
        ann, organiser = Page(browser), Page(browser)
        try:
            page = ann.open(server.invitations["ann"])
            page.wait_for_selector("body[data-state='ready']")
            assert page.input_value("#voter") == "ann" and "invite" not in page.url  # the link is used, not kept
            page.keyboard.press("1")
            page.wait_for_selector("body[data-stored='1'][data-state='ready']")
            page.click("#summary summary")
            page.wait_for_selector("#voters tr")
            board = organiser.open(server.organiser_url)
            board.wait_for_selector("body[data-state='need-name']")  # the organiser votes as nobody
            board.click("#summary summary")
            board.wait_for_selector("#voters tr")
            assert board.text_content("#voters").startswith("ann1")
            assert ann.errors == [] and organiser.errors == []
        finally:
            ann.close()
            organiser.close()
    with Store(tmp_path, readonly=True) as store:
        assert [v.voter for v in store.get_votes()] == ["ann"]


def test_hostile_answers_stay_text_without_the_csp(tmp_path, browser):  # noqa: F811
    build_workspace(tmp_path, hostile_every=1)  # every answer's first turn is hostile markup
    with VoteServer(tmp_path, VoteSettings(schedule=ScheduleOptions(control_share=0))).start() as server:
        voter = Voter(browser, server.url, "<img src=x onerror=\"window.__pwned='voter'\">", bypass_csp=True)
        try:
            for how in ("1", "2", "3"):
                shown = voter.page.text_content("#left") + voter.page.text_content("#right")
                assert "window.__pwned=" in shown  # shown as text
                assert voter.page.query_selector("#left script, #left img, #right script, #right img") is None
                voter.vote(how)
            voter.page.click("#summary summary")
            voter.page.wait_for_selector("#voters tr")
            assert "onerror" in voter.page.text_content("#voters")
            assert voter.page.evaluate("typeof window.__pwned") == "undefined"
            assert voter.p.errors == []
        finally:
            voter.p.close()
    assert json.dumps([v.voter for v in Store(tmp_path, readonly=True).get_votes()]).count("onerror") == 3


def test_votes_wait_in_the_page_while_a_run_holds_the_workspace_and_land_when_it_ends(tmp_path, browser):  # noqa: F811
    import os
    import subprocess
    import sys

    from tests.test_votes_server import HOLD, SRC

    build_workspace(tmp_path)
    with VoteServer(tmp_path, VoteSettings(wait_s=0.3)).start() as server:
        voter = Voter(browser, server.url, "ann")
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            voter.page.keyboard.press("1")
            voter.page.wait_for_selector("#status.busy")
            assert "wait in this page" in voter.page.text_content("#status")
            voter.page.wait_for_selector("body[data-state='ready']")  # voting goes on meanwhile
            voter.page.keyboard.press("2")
            with Store(tmp_path, readonly=True) as store:
                assert store.get_votes() == []
        finally:
            holder.communicate("\n", timeout=30)
        voter.page.wait_for_selector("body[data-stored='2']", timeout=15000)  # sent again once the run ends
        errors = [e for e in voter.p.errors if "503" not in e]  # the busy answers themselves
        voter.p.close()
    assert errors == []
    with Store(tmp_path, readonly=True) as store:
        assert [v.verdict for v in store.get_votes()] == ["a", "b"]


@pytest.mark.slow
def test_200_votes_of_two_voters_in_the_browser_survive_the_server_killed_between_votes(tmp_path, browser):  # noqa: F811
    from tests.test_votes_server import Server

    build_workspace(tmp_path, n_prompts=80)  # a voter meets an answer whose model they were shown never again
    server = Server(tmp_path)
    server.start()
    url = f"http://127.0.0.1:{server.port}/"
    ann, bob = Voter(browser, url, "ann"), Voter(browser, url, "bob")
    keys = "1234abtx"
    try:
        for n in range(100):
            if n and n % 25 == 0:  # SIGKILL between votes, then a new server: the items on screen still count
                server.kill()
                server.start()
            ann.vote(keys[n % len(keys)])
            bob.vote(keys[(n + 3) % len(keys)])
        seen = "".join(r for r in ann.responses + bob.responses if '"reveal": [' not in r)  # but the session ends
        assert not any(m in seen for m in MODELS)
        assert sum('"reveal": [' in r for r in ann.responses) == 5  # a session ends every 20 votes
        assert ann.p.errors == [] and bob.p.errors == []
    finally:
        ann.p.close()
        bob.p.close()
        server.kill()
    with Store(tmp_path, readonly=True) as store:
        votes = store.get_votes()
    assert len(votes) == len({v.vote_id for v in votes}) == 200
    assert sum(v.voter == "ann" for v in votes) == 100
