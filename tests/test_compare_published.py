"""`arena compare` on boards as users bring them (issue 21): a workspace of imported grades, the JSON of
`arena scores --json`, a Chatbot Arena human board CSV, an AlpacaEval CSV with standard errors for some rows,
names spelled differently, several boards at once. Every file is written here in its peer's layout."""

from __future__ import annotations

import json

import pytest
from scipy import stats
from typer.testing import CliRunner

from arena_learning.cli import app
from arena_learning.rating.boards import Z95, read_board
from arena_learning.rating.consistency import match_names

runner = CliRunner()
WIDE = {"COLUMNS": "300"}

# Model quality of the synthetic judge, and the human board's Elo of the same models (spelled as they publish).
QUALITY = {"vicuna-33b-v1.3": 7.0, "Llama-2-70b-chat-hf": 6.0, "mistralai/Mixtral-8x7B-Instruct-v0.1": 8.0,
           "gpt4_1106_preview": 9.0, "alpaca-13b": 3.0}
HUMAN = [("gpt-4-1106-preview", 1251, "+3/-4"), ("mixtral-8x7b-instruct-v0.1", 1114, "+2/-2"),
         ("vicuna-33b", 1090, "+4/-3"), ("llama-2-70b-chat", 1077, "+3/-2"), ("alpaca-13b", 901, "+6/-6"),
         ("Mistral-7B-Instruct-v0.2", 1072, "+2/-3")]


def cli(*args, code=0):
    result = runner.invoke(app, [str(a) for a in args], env=WIDE)
    assert result.exit_code == code, f"arena {args} exited {result.exit_code}:\n{result.output}"
    return result


def write_grades(path, judge="gpt-4", questions=range(81, 121)):
    """FastChat single-judgment JSONL: each model graded on every question and turn, by quality plus noise."""
    import random

    rng = random.Random(3)
    rows = []
    for q in questions:
        for model, quality in QUALITY.items():
            for turn in (1, 2):
                score = max(1, min(10, round(quality + rng.gauss(0, 1.5))))
                rows.append({"question_id": q, "model": model, "judge": [judge, "single-v1"],
                             "user_prompt": "...", "judgment": f"Rating: [[{score}]]", "score": score,
                             "turn": turn, "tstamp": 1.0})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def human_csv(path, rows=HUMAN):
    """Chatbot Arena's leaderboard table as saved from the site."""
    path.write_text("Rank* (UB),Model,Arena Elo,95% CI,Votes,Organization\n" + "".join(
        f"{i},{m},{e},{ci},1000,org\n" for i, (m, e, ci) in enumerate(rows, 1)), encoding="utf-8")
    return path


@pytest.fixture()
def ws(tmp_path):
    ws = tmp_path / "ws"
    cli("import-judgments", write_grades(tmp_path / "gpt-4_single.jsonl"), "-w", ws)
    return ws


def test_a_workspace_of_imported_grades_against_the_human_board(ws, tmp_path):
    human = human_csv(tmp_path / "human.csv")
    out = cli("compare", ws, human).stdout
    assert "5 models on both" in out and "Spearman" in out and "average consistency" in out
    data = json.loads(cli("compare", ws, human, "--json").stdout)
    assert data["layout_a"] == "workspace (judge gpt-4)" and data["layout_b"] == "chatbot-arena"
    # The names, as both boards publish them, all meet; none across versions.
    how = {c: (r, h) for c, r, h in data["matches"]}
    assert how == {"alpaca-13b": ("alpaca-13b", "exact"),
                   "gpt4_1106_preview": ("gpt-4-1106-preview", "loose"),
                   "Llama-2-70b-chat-hf": ("llama-2-70b-chat", "loose"),
                   "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral-8x7b-instruct-v0.1", "loose"),
                   "vicuna-33b-v1.3": ("vicuna-33b", "version dropped")}
    assert data["only_in_reference"] == ["Mistral-7B-Instruct-v0.2"]
    # Chatbot Arena's "+3/-4" is the interval [score - 4, score + 3].
    ref = {r.model: r for r in read_board(human).entries}
    assert (ref["gpt-4-1106-preview"].ci_low, ref["gpt-4-1106-preview"].ci_high) == (1247, 1254)
    # A second judge: the workspace needs --judge.
    cli("import-judgments", write_grades(tmp_path / "other.jsonl", judge="claude"), "-w", ws)
    bad = cli("compare", ws, human, code=2).output
    assert "--judge" in bad and "claude, gpt-4" in bad
    assert json.loads(cli("compare", ws, human, "--judge", "claude", "--json").stdout)["layout_a"] == \
        "workspace (judge claude)"


def test_the_json_of_scores_and_leaderboard_compares(ws, tmp_path):
    human = human_csv(tmp_path / "human.csv")
    scores = tmp_path / "scores.json"
    scores.write_text(cli("scores", ws, "--json", "-b", "200").stdout)
    board = tmp_path / "board.json"
    board.write_text(cli("leaderboard", ws, "--json").stdout)
    got = json.loads(cli("compare", scores, human, "--json").stdout)
    assert got["layout_a"] == "arena-scores" and got["n_models"] == 5
    means = {r["model"]: r["mean"] for r in json.loads(scores.read_text())["models"]}
    elo = {"gpt4_1106_preview": 1251, "mistralai/Mixtral-8x7B-Instruct-v0.1": 1114, "vicuna-33b-v1.3": 1090,
           "Llama-2-70b-chat-hf": 1077, "alpaca-13b": 901}
    assert got["spearman"] == pytest.approx(stats.spearmanr([means[m] for m in elo], list(elo.values())).statistic)
    assert json.loads(cli("compare", board, human, "--json").stdout)["layout_a"] == "arena-learning"


def test_column_options_for_either_side_and_standard_errors(tmp_path):
    mine = tmp_path / "mine.csv"
    mine.write_text("name,elo,lo,hi\nx,1100,1090,1110\ny,1000,990,1010\nz,900,890,910\nw,800,790,810\n")
    # AlpacaEval's CSV: win_rate with standard_error for every row, the LC win rate's only for two.
    alpaca = tmp_path / "alpaca.csv"
    alpaca.write_text(",win_rate,standard_error,n_total,length_controlled_winrate,lc_standard_error\n"
                      "x,50,1.0,805,55,0.5\ny,40,1.0,805,41,\nz,30,1.0,805,31,\nw,20,1.0,805,22,0.4\n")
    r = cli("compare", mine, alpaca, "--board-model-col", "name", "--board-score-col", "elo", "--board-lower-col",
            "lo", "--board-upper-col", "hi")
    assert "4 models on both" in r.stdout
    assert "the reference alpaca.csv has no intervals for 2 of 4 models: agreement and separability need them" \
        in r.stderr
    assert "length_controlled_winrate +- 1.96 x lc_standard_error (2 of 4 models have one)" in r.stderr
    # The raw win rate with its standard error: every model has an interval.
    r = cli("compare", mine, alpaca, "--board-model-col", "name", "--board-score-col", "elo", "--board-lower-col",
            "lo", "--board-upper-col", "hi", "--score-col", "win_rate", "--model-col", "Unnamed: 0")
    assert "win_rate +- 1.96 x standard_error (4 of 4 models have one)" in r.stderr and "no intervals" not in r.stderr
    r = cli("compare", mine, alpaca, "--board-model-col", "name", "--board-score-col", "elo", "--score-col", "win",
            code=2)
    assert "no column 'win'" in r.output and "--score-col" in r.output and "--board-" not in r.output
    frame = read_board(alpaca, model_col="Unnamed: 0", score_col="win_rate")
    assert frame.entries[0].ci_low == pytest.approx(50 - Z95) and "standard_error" in frame.notes[0]
    # A candidate-side column missing: the hint names the --board-* options.
    r = cli("compare", mine, alpaca, code=2)
    assert "no column 'model'" in r.output and "--board-model-col" in r.output


def test_aliases_and_versions_are_never_matched_silently(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text("model,score\nMistral-7B-Instruct-v0.2,5\nzephyr-7b-beta,4\nvicuna-13b-v1.5,3\nfoo,2\n")
    b = tmp_path / "b.csv"
    b.write_text("model,score\nmistral-7b-instruct-v0.1,9\nzephyr-beta,8\nvicuna-13b-v1.5,7\nbar,1\n")
    m = match_names(["Mistral-7B-Instruct-v0.2", "foo"], ["mistral-7b-instruct-v0.1", "bar"])
    assert m.pairs == [] and m.refused[0][:2] == ("Mistral-7B-Instruct-v0.2", "mistral-7b-instruct-v0.1")
    out = cli("compare", a, b, code=2).output
    assert "only 1 model(s) are on both boards" in out and "--aliases" in out
    aliases = tmp_path / "aliases.csv"
    aliases.write_text("# ours, theirs\nzephyr-7b-beta,zephyr-beta\nbar,foo\n")
    r = cli("compare", a, b, "--aliases", aliases)
    assert "3 models on both" in r.stdout and "not matched: different versions (v0.2, v0.1)" in r.stdout
    data = json.loads(cli("compare", a, b, "--aliases", aliases, "--json").stdout)
    assert sorted(data["matches"]) == [["foo", "bar", "alias"], ["vicuna-13b-v1.5", "vicuna-13b-v1.5", "exact"],
                                       ["zephyr-7b-beta", "zephyr-beta", "alias"]]
    assert data["only_in_candidate"] == ["Mistral-7B-Instruct-v0.2"]
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n")
    assert "bad.csv:1: an alias row has two names" in cli("compare", a, b, "--aliases", bad, code=2).output


def test_several_boards_one_row_each_with_the_average(ws, tmp_path):
    human = human_csv(tmp_path / "human.csv")
    scores = tmp_path / "scores.json"
    scores.write_text(cli("scores", ws, "--json", "-b", "200").stdout)
    board = tmp_path / "board.json"
    board.write_text(cli("leaderboard", ws, "--json").stdout)
    out = cli("compare", scores, board, human).stdout
    assert "each board against the reference human.csv" in out
    assert "scores.json" in out and "board.json" in out and "average" in out
    data = json.loads(cli("compare", "--reference", human, scores, board, "--json").stdout)
    assert data["reference"] == str(human) and [b["board_a"] for b in data["boards"]] == [str(scores), str(board)]
    for b in data["boards"]:
        one = json.loads(cli("compare", b["board_a"], human, "--json").stdout)
        assert b["spearman"] == one["spearman"] and b["average"] == one["average"]
        if b["average"] is not None:
            assert b["average"] == pytest.approx((b["spearman"] + b["agreement"] + b["separability"]) / 3)


def test_readme_worked_example_from_published_files_to_the_consistency_table(tmp_path):
    """docs/ratings.md "From published judgments to the consistency table": MT-Bench's 80 questions (../shared/data),
    grades written here in FastChat's layout (gzipped, pandas' float turns, a -1), a human board; three commands."""
    import gzip

    from .conftest import shared

    questions = shared("mt_bench", "question.jsonl")
    ids = [json.loads(line)["question_id"] for line in questions.open(encoding="utf-8")]
    assert len(ids) == 80
    grades = tmp_path / "gpt-4_single.jsonl"
    write_grades(grades, questions=ids)
    rows = [json.loads(x) for x in grades.read_text().splitlines()]
    for r in rows:
        r["turn"] = float(r["turn"])  # as pandas writes them
    rows[0]["score"] = -1  # one failed grading
    packed = tmp_path / "gpt-4_single.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    human = human_csv(tmp_path / "human.csv")
    ws = tmp_path / "ws"
    cli("ingest", questions, "--out", ws)  # optional: the questions' categories for `arena scores`
    out = cli("import-judgments", packed, "-w", ws).output
    assert "1 grades marked failed" in out and "skipped" not in out
    scores = cli("scores", ws, "--json").stdout
    by = {r["model"]: r for r in json.loads(scores)["models"]}
    assert sum(r["failed"] for r in by.values()) == 1 and set(by["alpaca-13b"]["categories"]) >= {"math", "writing"}
    (tmp_path / "scores.json").write_text(scores)
    r = cli("compare", tmp_path / "scores.json", human)
    assert "5 models on both" in r.stdout and "average consistency" in r.stdout
    assert "vicuna-33b-v1.3" in r.stdout and "version dropped" in r.stdout
    data = json.loads(cli("compare", tmp_path / "scores.json", human, "--json").stdout)
    assert data["spearman"] == pytest.approx(1.0)  # the grades follow QUALITY, which orders as the human board
