"""Votes: the store keeps each vote once, the schedule's items and controls, each voter's figures and flags,
votes as judge ``human`` on the board, and the audit against the workspace's votes equal to the audit against
the same votes as a label file."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from arena_learning.cli import app
from arena_learning.people.quality import VoterRule, flagged_voters, voter_figures
from arena_learning.people.schedule import EMPTY, Item, ScheduleOptions, next_item
from arena_learning.people.votes import label_rows, rated_votes, voter_agreement
from arena_learning.people.workspace import audit_with_votes, vote_pool, workspace_votes
from arena_learning.records import Answer, Judgment, Prompt, Vote
from arena_learning.store import Store

MODELS = ["m0", "m1", "m2", "m3"]


def build_workspace(root: Path, n_prompts: int = 12, models: list[str] = MODELS) -> None:
    """Write prompts in two categories, every model's answer, and one LLM judge's games in both orders."""
    with Store(root) as store:
        store.put_prompts("test", [Prompt(id=f"p{k}", turns=[f"question {k}"], category="math" if k % 2 else "code")
                                   for k in range(n_prompts)])
        store.put_answers([Answer(prompt_id=f"p{k}", model=m, turns=[f"{m} says {k}"])
                           for k in range(n_prompts) for m in models])
        games = []
        for k in range(n_prompts):
            for a in models:
                for b in models:
                    if a < b:
                        win = "model_a" if models.index(a) > models.index(b) else "model_b"
                        games.append(Judgment(prompt_id=f"p{k}", model_a=a, model_b=b, judge="llm", verdict=win))
                        games.append(Judgment(prompt_id=f"p{k}", model_a=b, model_b=a, judge="llm",
                                              verdict="model_a" if k % 3 else "model_b"))
        store.replace_judgments(["llm"], games)


def vote(item: Item, verdict: str, voter: str, n: int, seconds: float = 8.0) -> Vote:
    return Vote(vote_id=f"{voter}-{n:06d}", set_name=item.set_name, prompt_id=item.prompt_id, model_a=item.model_a,
                model_b=item.model_b, verdict=verdict, voter=voter, shown_at=1000.0 + n, voted_at=1000.0 + n + seconds,
                seconds=seconds, control=item.control)


def honest(item: Item, rng: np.random.Generator, noise: float = 0.1) -> str:
    """The better model by name number (m3 best), a uniformly random verdict with probability ``noise``."""
    if rng.random() < noise:
        return str(rng.choice(["a", "b", "tie", "both_bad"]))
    if item.control == "identical":
        return "tie"
    if EMPTY in (item.model_a, item.model_b):
        return "a" if item.model_b == EMPTY else "b"
    return "a" if item.model_a > item.model_b else "b"


def cast(root: Path, voter: str, n: int, choose, seed: int = 0, options: ScheduleOptions | None = None) -> list[Vote]:
    pool = vote_pool(root)
    rng = np.random.default_rng(seed)
    with Store(root) as store:
        for k in range(n):
            item = next_item(pool, store.get_votes(), voter, options or ScheduleOptions(), rng)
            assert item is not None
            store.record_vote(vote(item, choose(item, rng), voter, k))
        return store.get_votes()


def test_a_vote_is_stored_once_and_undo_retracts_it(tmp_path):
    build_workspace(tmp_path)
    v = vote(Item("test", "p1", "m0", "m1"), "a", "ann", 1)
    with Store(tmp_path) as store:
        assert store.record_vote(v) is True
        assert store.record_vote(v) is False  # the same vote sent again after a reload
        assert store.get_votes() == [v]
        assert store.retract_vote(v.vote_id, "bob") is False  # only its voter undoes it
        assert store.retract_vote(v.vote_id, "ann") is True
        assert store.get_votes() == [] and store.get_votes(retracted=True)[0].retracted


def test_forgetting_a_model_drops_the_votes_on_its_answers_and_keeps_the_rest(tmp_path):
    build_workspace(tmp_path)
    kept = vote(Item("test", "p1", "m1", "m2"), "a", "ann", 1)
    with Store(tmp_path) as store:
        for v in (vote(Item("test", "p1", "m0", "m1"), "a", "ann", 0), kept,
                  vote(Item("test", "p2", "m2", "m0"), "b", "bob", 2)):
            store.record_vote(v)
        assert store.forget_model("m0")["votes"] == 2  # its answers go, so the votes on them go
        assert store.get_votes() == [kept]


def test_a_workspace_made_before_votes_gains_the_table_and_reads_empty(tmp_path):
    build_workspace(tmp_path)
    db = sqlite3.connect(tmp_path / "arena.db")
    db.execute("DROP TABLE votes")
    db.commit()
    db.close()
    with Store(tmp_path, readonly=True) as store:
        assert store.get_votes() == []
    with Store(tmp_path) as store:
        store.record_vote(vote(Item("test", "p1", "m0", "m1"), "b", "ann", 1))
        assert len(store.get_votes()) == 1


OLD_VOTES = """CREATE TABLE votes (vote_id TEXT PRIMARY KEY, set_name TEXT NOT NULL, prompt_id TEXT NOT NULL,
    model_a TEXT NOT NULL, model_b TEXT NOT NULL, verdict TEXT NOT NULL, voter TEXT NOT NULL, shown_at REAL NOT NULL,
    voted_at REAL NOT NULL, seconds REAL NOT NULL, control TEXT, retracted INTEGER NOT NULL DEFAULT 0)"""


def test_a_workspace_with_votes_from_before_voter_sessions_keeps_them_and_gains_sessions(tmp_path):
    build_workspace(tmp_path)
    db = sqlite3.connect(tmp_path / "arena.db")
    db.execute("DROP TABLE votes")
    db.execute("DROP TABLE voters")
    db.execute(OLD_VOTES)
    db.execute("INSERT INTO votes VALUES ('page-made-id-1', 'test', 'p1', 'm0', 'm1', 'a', 'ann', 1.0, 9.0, 8.0, "
               "NULL, 0)")
    db.commit()
    db.close()
    with Store(tmp_path, readonly=True) as store:  # read as it is: cast before sessions
        assert [(v.vote_id, v.session) for v in store.get_votes()] == [("page-made-id-1", None)]
        assert store.get_voter("ann") is None
    with Store(tmp_path) as store:  # opened to write: the column and the voters table are added, no vote moves
        assert store.bind_voter("ann", "digest") is True and store.bind_voter("ann", "other") is False
        assert store.get_voter("ann") == ("digest", 0)
        assert store.end_session("ann", 0) is True and store.end_session("ann", 0) is False
        store.record_vote(vote(Item("test", "p2", "m1", "m2"), "b", "ann", 2).model_copy(update={"session": 1}))
        assert [(v.vote_id, v.session) for v in store.get_votes()] == [("page-made-id-1", None), ("ann-000002", 1)]
        assert store.bind_voter("ann", "invited", replace=True) and store.get_voter("ann") == ("invited", 1)


def test_a_session_shows_no_prompt_twice_no_answer_whose_model_is_known_and_no_undone_pair(tmp_path):
    build_workspace(tmp_path)
    pool = vote_pool(tmp_path)
    known = vote(Item("test", "p1", "m0", "m1"), "a", "ann", 0).model_copy(update={"session": 0})  # named at its end
    undone = vote(Item("test", "p2", "m2", "m3"), "b", "ann", 1).model_copy(update={"session": 1, "retracted": True})
    live = vote(Item("test", "p4", "m1", "m3"), "a", "ann", 2).model_copy(update={"session": 1})
    items = [next_item(pool, [known, undone, live], "ann",
                       ScheduleOptions(control_share=0.5, control_kinds=("repeat",), mode="random", seed=seed),
                       np.random.default_rng(seed), session=1, shown={"p3", "p4"}) for seed in range(200)]
    assert all(i is not None for i in items)
    real = [i for i in items if i.control is None]
    assert real and not any(i.prompt_id in ("p3", "p4") for i in real)  # shown in this session
    assert not any(i.prompt_id == "p1" and {i.model_a, i.model_b} & {"m0", "m1"} for i in items)  # models known
    assert not any(i.prompt_id == "p2" and {i.model_a, i.model_b} == {"m2", "m3"} for i in items)  # undone stays used
    repeats = {(i.prompt_id, i.model_a, i.model_b) for i in items if i.control == "repeat"}
    assert repeats == {("p4", "m3", "m1")}  # only a pair of this session, the other way round


def test_controls_come_once_per_block_and_real_items_are_never_repeated(tmp_path):
    build_workspace(tmp_path)
    options = ScheduleOptions(control_share=0.2, control_kinds=("empty", "identical", "empty", "empty", "repeat"))
    votes = cast(tmp_path, "ann", 30, honest, options=options)
    kinds = [v.control for v in votes]
    assert sum(k is not None for k in kinds) == 6  # 20%: one in each block of five
    assert all(sum(k is not None for k in kinds[b:b + 5]) == 1 for b in range(0, 30, 5))
    assert "repeat" in kinds and "identical" in kinds and "empty" in kinds
    real = [(v.prompt_id, *sorted((v.model_a, v.model_b))) for v in votes if v.control is None]
    assert len(real) == len(set(real)) == 24
    assert {v.model_a == v.model_b for v in votes if v.control == "identical"} == {True}
    assert all(EMPTY in (v.model_a, v.model_b) for v in votes if v.control == "empty")
    repeat = next(v for v in votes if v.control == "repeat")
    first = next(v for v in votes if v.control is None and v.prompt_id == repeat.prompt_id
                 and {v.model_a, v.model_b} == {repeat.model_a, repeat.model_b})
    assert (first.model_a, first.model_b) == (repeat.model_b, repeat.model_a)  # the other order


def test_a_random_clicker_is_flagged_and_an_honest_voter_is_not(tmp_path):
    build_workspace(tmp_path)
    cast(tmp_path, "honest", 30, honest, seed=1)
    votes = cast(tmp_path, "clicker", 30, lambda item, rng: str(rng.choice(["a", "b", "tie", "both_bad"])), seed=2)
    figures = {f.voter: f for f in voter_figures(votes)}
    assert figures["honest"].controls == 7 and figures["honest"].repeats == 1  # 25%: 8 controls, the 8th a repeat
    assert not figures["honest"].flagged and figures["clicker"].flagged
    assert flagged_voters(votes) == {"clicker"}
    assert figures["clicker"].reasons[0].startswith("failed ")
    fast = [v.model_copy(update={"seconds": 0.5}) for v in votes if v.voter == "honest"]
    assert voter_figures(fast, VoterRule())[0].reasons == ["30 of 30 votes under 2 s"]
    rated = workspace_votes(tmp_path)
    assert rated.left_out == ["clicker"] and {v.voter for v in rated.rated} == {"honest"}
    assert all(v.control is None for v in rated.rated)


def test_random_schedule_draws_unvoted_pairs(tmp_path):
    build_workspace(tmp_path)
    votes = cast(tmp_path, "ann", 20, honest, options=ScheduleOptions(mode="random", control_share=0))
    real = {(v.prompt_id, *sorted((v.model_a, v.model_b))) for v in votes}
    assert len(real) == 20 and all(v.control is None for v in votes)


def test_voter_agreement_counts_two_people_on_one_pair():
    a = vote(Item("test", "p1", "m0", "m1"), "a", "ann", 1)
    b = vote(Item("test", "p1", "m1", "m0"), "b", "bob", 2)  # the same winner seen from the other side
    c = vote(Item("test", "p1", "m0", "m1"), "tie", "cy", 3)
    agreement = voter_agreement([a, b, c])
    assert (agreement.n, agreement.agree) == (3, 1)


def test_human_board_rates_the_votes_with_intervals_and_leaves_flagged_voters_out(tmp_path):
    build_workspace(tmp_path)
    cast(tmp_path, "ann", 40, honest, seed=3)
    cast(tmp_path, "clicker", 30, lambda item, rng: "a", seed=4)  # always left: fails the empty controls
    runner = CliRunner()
    out = runner.invoke(app, ["leaderboard", str(tmp_path), "--judge", "human", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [r["model"] for r in rows] == ["m3", "m2", "m1", "m0"]
    assert all(r["ci_low"] <= r["rating"] <= r["ci_high"] for r in rows)
    assert sum(r["battles"] for r in rows) == 2 * len(workspace_votes(tmp_path).rated)
    kept = runner.invoke(app, ["leaderboard", str(tmp_path), "--judge", "human", "--json", "--keep-flagged"])
    assert sum(r["battles"] for r in json.loads(kept.stdout)) > sum(r["battles"] for r in rows)
    table = runner.invoke(app, ["leaderboard", str(tmp_path), "--judge", "human"])
    assert "left out, flagged: clicker" in table.output
    bad = runner.invoke(app, ["leaderboard", str(tmp_path), "--keep-flagged"])
    assert bad.exit_code == 2 and "--judge human" in bad.output


def test_audit_against_the_votes_equals_the_audit_against_them_as_a_label_file(tmp_path):
    build_workspace(tmp_path)
    cast(tmp_path, "ann", 30, honest, seed=5)
    cast(tmp_path, "bob", 30, lambda item, rng: honest(item, rng, noise=0.3), seed=6)
    found = workspace_votes(tmp_path)
    labels = tmp_path / "labels.csv"
    with labels.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, ["prompt_id", "model_a", "model_b", "winner", "voter"])
        writer.writeheader()
        writer.writerows(label_rows(found.rated))
    from_votes = audit_with_votes(tmp_path)
    from_file = audit_with_votes(tmp_path, human=labels)
    assert from_votes.human_agreement == from_file.human_agreement
    assert from_votes.human_agreement[0].n == len(rated_votes(found.votes)) > 40
    assert [v.voter for v in from_votes.voters] == ["ann", "bob"] and from_file.voters == []
    total = from_votes.human_agreement[0]
    by_cat = from_votes.human_by_category
    assert sorted(by_cat) == ["code", "math"] and sum(rows[0].n for rows in by_cat.values()) == total.n
    assert sum(rows[0].agree for rows in by_cat.values()) == total.agree
    # the judge says the higher-numbered model wins on prompts k % 3 == 0 only in one order: a tie there
    split = [d for d in from_votes.human_disagreements if d["judge_says"] == "tie"]
    assert split and all(int(d["prompt_id"][1:]) % 3 == 0 for d in split)
    assert all(d["people_say"] != d["judge_says"] for d in from_votes.human_disagreements)
    out = CliRunner().invoke(app, ["judge-audit", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "agreement with human labels" in out.output and "voters" in out.output
    assert "where the judges and the votes disagree" in out.output and "category math" in out.output


def test_no_votes_is_a_clear_error(tmp_path):
    build_workspace(tmp_path)
    out = CliRunner().invoke(app, ["leaderboard", str(tmp_path), "--judge", "human"])
    assert out.exit_code == 2 and "arena vote" in out.output


@pytest.mark.filterwarnings("ignore::arena_learning.rating.bt.RatingWarning")  # a clear winner: the prior's note
def test_the_report_shows_the_board_of_the_votes_beside_the_judges(tmp_path):
    from html import escape

    from arena_learning.report.html import write_report
    from tests.test_report import EVIL, make_workspace

    ws, ratings = make_workspace(tmp_path)
    skill = {"weak": 0, "mid": 1, EVIL: 2}

    def by_skill(item: Item, rng: np.random.Generator) -> str:
        if item.control == "identical":
            return "tie"
        if EMPTY in (item.model_a, item.model_b):
            return "a" if item.model_b == EMPTY else "b"
        return "a" if skill[item.model_a] > skill[item.model_b] else "b"

    cast(ws, "ann", 40, by_skill)
    page = write_report(ws, tmp_path / "r.html").read_text()
    section = page[page.index("People&#x27;s votes"):page.index('id="votes-table"') + 3000]
    assert "40 votes" not in section and "votes by 1 voter(s)" in section  # controls are not rated
    assert escape(EVIL) in section and EVIL not in section
    people = section.split("<tr")[2:5]
    assert len(people) == 3 and all("-</td>" not in row for row in people)
