"""Judgments in and out: arena-hard-auto and FastChat judgment files written here import to the battles
their own tools define, and an export re-imports to the same battles (in-process and through the CLI)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from arena_learning.arena.peers import (
    peer_battles,
    read_judgments,
    split_turn,
    turn_prompt_id,
    write_arena_hard,
    write_fastchat_pair,
    write_fastchat_single,
)
from arena_learning.errors import ArenaError
from arena_learning.rating.baseline import baseline_win_rates
from arena_learning.store import Store

from .conftest import arena as run_arena
from .conftest import shared

BASE = "gpt-4-0314"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def arena_hard_uids(n):
    with shared("arena-hard-v0.1", "question.jsonl").open(encoding="utf-8") as f:
        return [json.loads(next(f))["uid"] for _ in range(n)]


def arena_hard_rows(uids):
    """Judgment records as arena-hard-auto's gen_judgment.py writes them (game 1: the baseline is A)."""
    labels = {  # (game 1, game 2) per model and prompt; None is arena-hard's null score
        "gpt-4-0613": [("A>B", "A=B"), ("B>>A", "A>B"), ("A=B", "B>A"), ("B>A", None), ("A<B", "A>>B")],
        "gpt-3.5-turbo-0125": [("A>>B", "B>>A"), ("A>B", "B>A"), ("B=A", "A=B"), ("A>B", "B>A"), ("A>>B", "B>A")],
    }
    rows = []
    for model, games in labels.items():
        for uid, (g1, g2) in zip(uids, games):
            rows.append({"question_id": uid, "model": model, "judge": "gpt-4-1106-preview",
                         "games": [{"user_prompt": "...", "judgment": f"My answer ... [[{g1}]]", "score": g1},
                                   {"user_prompt": "...", "judgment": f"My answer ... [[{g2}]]", "score": g2}]})
    return rows


def arena_hard_own_points(rows, weight=3):
    """arena-hard-auto v0.1 show_result.py ``get_battles_from_judgment``, written out: each model's game points.

    Each game on its own: a game with a null score has weight 0 (left out), the other game of its
    record stays. The label map takes v2.0's mirrored spellings too.
    """
    label_to_score = {"A>B": [1], "A>>B": [1] * weight, "A=B": [0.5], "A<<B": [0] * weight, "A<B": [0],
                      "B>A": [0], "B>>A": [0] * weight, "B=A": [0.5], "B<<A": [1] * weight, "B<A": [1]}
    out = Counter()
    for r in rows:
        g = r["games"]
        points = [1 - s for s in label_to_score.get(g[0]["score"], [])] + label_to_score.get(g[1]["score"], [])
        for s in points:
            out[(r["question_id"], r["model"], s)] += 1
    return out


def our_points(battles, baseline=BASE):
    point = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}
    out = Counter()
    for b in battles:
        model = b.model_b if b.model_a == baseline else b.model_a
        p = point[b.outcome] if b.model_a == model else 1 - point[b.outcome]
        out[(b.prompt_id, model, p)] += b.weight
    return out


def battle_keys(battles):
    return sorted((b.prompt_id, b.model_a, b.model_b, b.outcome, b.weight, b.judge) for b in battles)


def test_arena_hard_judgments_give_arena_hards_own_battles_and_win_rates(tmp_path):
    rows = arena_hard_rows(arena_hard_uids(5))
    path = write_jsonl(tmp_path / "gpt-4-0613.jsonl", rows)
    got = read_judgments([path], baseline=BASE)
    assert got.formats == {"arena-hard"} and got.judges == ["gpt-4-1106-preview"] and not got.skipped
    assert len(got.judgments) == 20 and sum(j.status == "failed" for j in got.judgments) == 1
    battles = peer_battles(got.judgments, "arena-hard", strong_weight=3)
    assert our_points(battles) == arena_hard_own_points(rows)
    # The headline's point estimate is arena-hard's mean score per model.
    own = arena_hard_own_points(rows)
    for r in [r for r in baseline_win_rates(battles, BASE, bootstrap=0) if r.model != BASE]:
        pts = [(p, n) for (_, m, p), n in own.items() if m == r.model]
        assert r.win_rate == pytest.approx(sum(p * n for p, n in pts) / sum(n for _, n in pts), abs=1e-12)
    # Game 1 shows the baseline as A, game 2 swaps.
    first = next(j for j in got.judgments if j.prompt_id == rows[0]["question_id"] and j.model_b == "gpt-4-0613")
    assert (first.model_a, first.labels, first.verdict) == (BASE, ["A>B"], "model_a")


def test_arena_hard_export_reimports_to_the_same_battles(tmp_path):
    rows = arena_hard_rows(arena_hard_uids(5))
    got = read_judgments([write_jsonl(tmp_path / "in.jsonl", rows)], baseline=BASE)
    report = write_arena_hard(got.judgments, BASE, tmp_path / "out")
    assert sorted(p.name for p in report.files) == ["gpt-3.5-turbo-0125.jsonl", "gpt-4-0613.jsonl"]
    assert report.records == 10 and report.left_out == 0
    again = read_judgments(report.files, baseline=BASE)
    assert (battle_keys(peer_battles(again.judgments, "arena-hard"))
            == battle_keys(peer_battles(got.judgments, "arena-hard")))
    out = [json.loads(line) for line in report.files[0].read_text().splitlines()]
    assert {"uid", "model", "judge", "games"} <= set(out[0]) and len(out[0]["games"]) == 2


def fastchat_pair_rows():
    """FastChat gen_judgment.py pairwise records: g1 shows model_1 as A; winners named model_1/model_2."""
    spec = [  # question, turn, model_1, model_2, g1, g2
        (81, 1, "vicuna-13b", "gpt-3.5-turbo", "model_2", "model_2"),
        (81, 2, "vicuna-13b", "gpt-3.5-turbo", "model_1", "model_2"),
        (82, 1, "vicuna-13b", "gpt-3.5-turbo", "tie", "tie"),
        (82, 1, "llama-13b", "gpt-3.5-turbo", "model_1", "model_1"),
        (83, 1, "llama-13b", "gpt-3.5-turbo", "error", "model_2"),
        (83, 2, "llama-13b", "vicuna-13b", "model_2", "tie"),
        (84, 1, "llama-13b", "vicuna-13b", "model_2", "model_2"),
    ]
    return [{"question_id": q, "model_1": m1, "model_2": m2, "g1_winner": g1, "g2_winner": g2,
             "judge": ["gpt-4", "pair-v2" if t == 1 else "pair-v2-multi-turn"], "g1_user_prompt": "...",
             "g1_judgment": f"... [[{'A' if g1 == 'model_1' else 'B'}]]", "g2_user_prompt": "...",
             "g2_judgment": "...", "turn": t, "tstamp": 1700000000.0} for q, t, m1, m2, g1, g2 in spec]


def fastchat_own_counts(rows):
    """FastChat show_result.py ``display_result_pairwise`` (pairwise-all), written out: win/loss/tie per model."""
    out = Counter()
    for r in rows:
        if "error" in (r["g1_winner"], r["g2_winner"]):
            continue
        if r["g1_winner"] == "tie" or r["g1_winner"] != r["g2_winner"]:
            out[(r["model_1"], "tie")] += 1
            out[(r["model_2"], "tie")] += 1
        else:
            first_won = r["g1_winner"] == "model_1"
            winner, loser = (r["model_1"], r["model_2"]) if first_won else (r["model_2"], r["model_1"])
            out[(winner, "win")] += 1
            out[(loser, "loss")] += 1
    return out


def our_counts(battles):
    out = Counter()
    for b in battles:
        if b.outcome == "tie":
            out[(b.model_a, "tie")] += 1
            out[(b.model_b, "tie")] += 1
        else:
            winner, loser = (b.model_a, b.model_b) if b.outcome == "model_a" else (b.model_b, b.model_a)
            out[(winner, "win")] += 1
            out[(loser, "loss")] += 1
    return out


def test_fastchat_pairwise_judgments_give_fastchats_own_counts_and_round_trip(tmp_path):
    rows = fastchat_pair_rows()
    got = read_judgments([write_jsonl(tmp_path / "gpt-4_pair.jsonl", rows)])
    assert got.formats == {"fastchat-pair"} and got.judges == ["gpt-4"]
    battles = peer_battles(got.judgments, "fastchat-pair")
    assert len(battles) == 6 and our_counts(battles) == fastchat_own_counts(rows)
    # Turn 2 is its own battle, beside turn 1 of the same question.
    assert {b.prompt_id for b in battles} == {"81", "81#turn2", "82", "83#turn2", "84"}
    # Game 2 shows model_2 first: its winner "model_2" is our model_a there.
    g2 = next(j for j in got.judgments if j.prompt_id == "81" and j.model_a == "gpt-3.5-turbo")
    assert (g2.model_b, g2.verdict) == ("vicuna-13b", "model_a")
    report = write_fastchat_pair(got.judgments, tmp_path / "out_pair.jsonl")
    assert report.records == 7
    out = [json.loads(line) for line in report.files[0].read_text().splitlines()]
    assert {(r["question_id"], r["turn"], r["g1_winner"], r["g2_winner"]) for r in out} == \
        {(r["question_id"], r["turn"], r["g1_winner"], r["g2_winner"]) for r in rows}
    again = read_judgments(report.files)
    assert battle_keys(peer_battles(again.judgments, "fastchat-pair")) == battle_keys(battles)


def test_fastchat_single_grades_pair_up_and_round_trip(tmp_path):
    grades = {(81, 1): {"a": 8, "b": 6, "c": 8}, (81, 2): {"a": 3, "b": 9, "c": -1}, (82, 1): {"a": 5, "b": 5}}
    rows = [{"question_id": q, "model": m, "judge": ["gpt-4", "single-v1" if t == 1 else "single-v1-multi-turn"],
             "user_prompt": "...", "judgment": f"Rating: [[{s}]]", "score": s, "turn": t, "tstamp": 1.0}
            for (q, t), by in grades.items() for m, s in by.items()]
    got = read_judgments([write_jsonl(tmp_path / "gpt-4_single.jsonl", rows)])
    # The -1 (FastChat's failed grading) is kept as a failed game, not skipped.
    assert got.formats == {"fastchat-single"} and not got.skipped and got.failed_grades == 1
    assert [(j.model_a, j.model_b, j.scores_a, j.scores_b) for j in got.judgments if j.status == "failed"] == \
        [("a", "c", [3.0], []), ("b", "c", [9.0], [])]
    battles = peer_battles(got.judgments, "fastchat-single")
    # Each pair graded on the same question and turn: the higher grade wins, equal grades tie.
    assert battle_keys(battles) == sorted([
        ("81", "a", "b", "model_a", 1, "gpt-4"), ("81", "a", "c", "tie", 1, "gpt-4"),
        ("81", "b", "c", "model_b", 1, "gpt-4"), ("81#turn2", "a", "b", "model_b", 1, "gpt-4"),
        ("82", "a", "b", "tie", 1, "gpt-4")])
    # Each grade is kept once with its text; the games reference it (no text copied into them).
    assert len(got.grades) == len(rows) and all(j.raw == "" for j in got.judgments)
    report = write_fastchat_single(got.judgments, tmp_path / "out_single.jsonl", grades=got.grades)
    out = [json.loads(line) for line in report.files[0].read_text().splitlines()]
    # Every grade once, with its judgment text, the failed one as -1 again (FastChat's show_result.py means by
    # turn come out the same).
    assert sorted((r["question_id"], r["model"], r["turn"], r["score"], r["judgment"]) for r in out) == sorted(
        (r["question_id"], r["model"], r["turn"], r["score"], r["judgment"]) for r in rows)
    again = read_judgments(report.files)
    assert battle_keys(peer_battles(again.judgments, "fastchat-single")) == battle_keys(battles)


def test_turn_ids_round_trip():
    assert turn_prompt_id(81, 1) == "81" and turn_prompt_id(81, 2) == "81#turn2"
    assert split_turn("81#turn2") == ("81", 2) and split_turn("abc") == ("abc", 1)


def test_bad_judgment_records_are_skipped_with_their_line(tmp_path):
    good = arena_hard_rows(["u1"])[0]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([json.dumps(good), "{not json", json.dumps({"question_id": 1}),
                               json.dumps({**good, "games": [good["games"][0]]}),
                               json.dumps({**good, "model": BASE})]) + "\n", encoding="utf-8")
    got = read_judgments([path], baseline=BASE)
    assert len(got.judgments) == 2
    assert [s.split(": ", 1)[0] for s in got.skipped] == [f"{path}:2", f"{path}:3", f"{path}:4", f"{path}:5"]
    assert "not a judgment record" in got.skipped[1] and "two games" in got.skipped[2]
    assert "is the baseline" in got.skipped[3]
    single = write_jsonl(tmp_path / "single.jsonl", [{"question_id": 81, "model": "a", "judge": ["g", "s"],
                                                     "score": 7, "turn": "two"}])
    got = read_judgments([single])
    assert not got.judgments and "turn 'two' is not a turn number" in got.skipped[0]
    with pytest.raises(ArenaError, match="unknown judgment format 'csv'"):
        read_judgments([path], fmt="csv")


def arena(*args, ok=True):
    proc = run_arena(*args)
    if ok:
        assert proc.returncode == 0, f"arena {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_cli_import_headline_export_reimport(tmp_path):
    rows = arena_hard_rows(arena_hard_uids(5))
    files = [write_jsonl(tmp_path / f"{m}.jsonl", [r for r in rows if r["model"] == m])
             for m in ("gpt-4-0613", "gpt-3.5-turbo-0125")]
    ws, ws2 = tmp_path / "ws", tmp_path / "ws2"
    # One model's file at a time: the second import adds to the first.
    arena("import-judgments", files[0], "-w", ws, "--baseline", BASE)
    proc = arena("import-judgments", files[1], "-w", ws, "--baseline", BASE)
    assert "10 arena-hard games imported (0 failed), 19 battles in all" in proc.stderr
    head = json.loads(arena("leaderboard", ws, "--baseline", BASE, "--json").stdout)
    assert head["judge"] == "gpt-4-1106-preview" and head["bootstrap"] == 100
    by_model = {r["model"]: r for r in head["rows"]}
    with Store(ws, readonly=True) as store:
        battles = store.get_battles("gpt-4-1106-preview")
    expected = {r.model: r for r in baseline_win_rates(battles, BASE, bootstrap=100, seed=0)}
    for m in ("gpt-4-0613", "gpt-3.5-turbo-0125", BASE):
        assert by_model[m]["win_rate"] == pytest.approx(expected[m].win_rate)
        assert (by_model[m]["ci_low"], by_model[m]["ci_high"]) == pytest.approx(
            (expected[m].ci_low, expected[m].ci_high))
    # Bradley-Terry on the imported battles needs no run config; a strong verdict is three battles.
    board = json.loads(arena("leaderboard", ws, "--judge", "gpt-4-1106-preview", "--json").stdout)
    assert {r["model"] for r in board} == {BASE, "gpt-4-0613", "gpt-3.5-turbo-0125"}
    assert sum(r["battles"] for r in board) == 2 * sum(b.weight for b in battles)
    table = arena("leaderboard", ws, "--baseline", BASE).stdout
    assert f"win rate against {BASE}" in table and "95% CI" in table
    arena("export-judgments", ws, "--format", "arena-hard", "--out", tmp_path / "out")
    arena("import-judgments", *sorted((tmp_path / "out").glob("*.jsonl")), "-w", ws2, "--baseline", BASE)
    with Store(ws2, readonly=True) as store:
        assert battle_keys(store.get_battles("gpt-4-1106-preview")) == battle_keys(battles)
    # Bad input: exit 2 and a message that says what and what to do.
    bad = arena("leaderboard", ws, "--baseline", "gpt-5", ok=False)
    assert bad.returncode == 2 and "baseline 'gpt-5' has no battles here" in bad.stderr
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"hello": 1}])
    bad = arena("import-judgments", empty, "-w", tmp_path / "ws3", ok=False)
    assert bad.returncode == 2 and "nothing was imported" in bad.stderr and "empty.jsonl:1" in bad.stderr
    # A judge name that holds a run's own judgments is not overwritten by an import.
    with Store(ws2) as store:
        store.set_meta("peer_judges", {})
    bad = arena("import-judgments", files[0], "-w", ws2, ok=False)
    assert bad.returncode == 2 and "already holds judgments of a run" in bad.stderr and "--judge" in bad.stderr
    bad = arena("export-judgments", ws, "--format", "fastchat-pairs", "--out", tmp_path / "x.jsonl", ok=False)
    assert bad.returncode == 2 and "unknown judgment format 'fastchat-pairs'" in bad.stderr
