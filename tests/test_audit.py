"""Judge audit: figures on hand-built judgments with known bias equal hand-computed values."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from arena_learning.arena.audit import (
    A_WINS,
    B_WINS,
    TIE,
    audit_judge,
    battle_outcomes,
    human_agreement,
    judge_agreement,
    read_human_labels,
    wilson_interval,
)
from arena_learning.cli.audit import register
from arena_learning.errors import ArenaError
from arena_learning.records import Answer, Battle, Judgment
from arena_learning.store import Store

A, B, T = "model_a", "model_b", "tie"


def game(prompt, first, second, verdict, judge="j1", status="ok", flags=()):
    return Judgment(
        prompt_id=prompt, model_a=first, model_b=second, judge=judge, verdict=verdict, status=status, flags=list(flags)
    )


def j1_games():
    """Judge j1 on the pair (x, y): 14 games, the biases below worked out by hand.

    prompt  (x, y)  (y, x)   both orders?   first-shown result r1 + r2
    p1      A       B        yes            +1 - 1 = 0  consistent (x twice)
    p2      A       A        yes            +1 + 1 > 0  favours first
    p3      T       T        yes             0 + 0 = 0  consistent (two ties)
    p4      A       T        yes            +1 + 0 > 0  favours first
    p5      B       B        yes            -1 - 1 < 0  favours second
    p6      A       failed   no
    p7      no verdict  A    no
    """
    return [
        game("p1", "x", "y", A, flags=["prompt_injection"]), game("p1", "y", "x", B),
        game("p2", "x", "y", A), game("p2", "y", "x", A, flags=["prompt_injection", "refusal"]),
        game("p3", "x", "y", T), game("p3", "y", "x", T),
        game("p4", "x", "y", A), game("p4", "y", "x", T),
        game("p5", "x", "y", B), game("p5", "y", "x", B),
        game("p6", "x", "y", A), game("p6", "y", "x", None, status="failed"),
        game("p7", "x", "y", None), game("p7", "y", "x", A),
    ]  # fmt: skip


def answers():
    """x writes 100 characters over two turns, y 10; on p7 both write 10 (no length signal)."""
    out = []
    for k in range(1, 8):
        p = f"p{k}"
        out.append(Answer(prompt_id=p, model="x", turns=["a" * 10] if p == "p7" else ["a" * 60, "b" * 40]))
        out.append(Answer(prompt_id=p, model="y", turns=["c" * 10]))
    return out


def test_audit_figures_equal_the_hand_computed_values():
    audit = audit_judge(j1_games(), answers())
    assert (audit.judge, audit.games, audit.failed, audit.no_verdict, audit.scored) == ("j1", 14, 1, 1, 12)
    assert audit.parse_failure_rate == pytest.approx(1 / 14)
    # ties: p3 twice, p4 once, of 12 scored games
    assert (audit.ties, audit.tie_rate) == (3, pytest.approx(0.25))
    # decisive games won by the first-shown answer: p1 1, p2 2, p4 1, p6 1, p7 1 = 6 of 9
    assert (audit.decisive, audit.first_wins) == (9, 6)
    assert audit.position_bias == pytest.approx(2 / 3)
    # Wilson 95% interval of 6/9, computed by hand
    assert audit.position_bias_ci == pytest.approx((0.3542, 0.8794), abs=1e-4)
    assert (audit.pairs_both_orders, audit.consistent, audit.favour_first, audit.favour_second) == (5, 2, 2, 1)
    assert audit.order_consistency == pytest.approx(0.4)
    assert audit.pairs_one_order == 2
    # x (longer) wins 6 decisive games, y 3, but p7's (y wins) lengths are equal: 6 of 8
    assert (audit.length_games, audit.longer_wins) == (8, 6)
    assert audit.length_bias == pytest.approx(0.75)
    assert audit.flags == {"prompt_injection": 2, "refusal": 1}
    assert audit.injection_flags == 2


def test_an_unbiased_judge_scores_one_half_and_full_consistency():
    games = []
    for k in range(4):
        winner_first = k % 2 == 0  # x wins on even prompts, y on odd, whatever the order
        games += [game(f"q{k}", "x", "y", A if winner_first else B), game(f"q{k}", "y", "x", B if winner_first else A)]
    audit = audit_judge(games)
    assert audit.position_bias == 0.5 and audit.order_consistency == 1.0
    assert audit.length_bias is None and audit.length_games == 0


def test_audit_needs_one_judge():
    with pytest.raises(ArenaError, match="2 judges"):
        audit_judge([game("p1", "x", "y", A), game("p1", "y", "x", A, judge="j2")])
    with pytest.raises(ArenaError, match="no judgments"):
        audit_judge([])


def test_a_game_listed_twice_is_an_error():
    with pytest.raises(ArenaError, match="two games of 'x'.*prompt 'p1'"):
        audit_judge([game("p1", "x", "y", A), game("p1", "x", "y", B)])


def test_wilson_interval_of_nothing_is_none():
    assert wilson_interval(0, 0) is None
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)


# --------------------------------------------------------------------------- agreement


def j2_games():
    """Judge j2, consistent in both orders: p1 x, p2 y, p3 tie, p4 x, p5 tie, p6 y, p8 x (no p7)."""
    out = []
    for p, winner in [("p1", "x"), ("p2", "y"), ("p3", None), ("p4", "x"), ("p5", None), ("p6", "y"), ("p8", "x")]:
        for first, second in (("x", "y"), ("y", "x")):
            v = T if winner is None else A if winner == first else B
            out.append(game(p, first, second, v, judge="j2"))
    return out


def test_battle_outcomes_are_the_majority_of_the_verdicts():
    # j1: p1 x twice; p2 split; p3 ties; p4 win + tie; p5 split; p6, p7 one game each
    assert battle_outcomes(j1_games()) == {
        ("p1", "x", "y"): A_WINS,
        ("p2", "x", "y"): TIE,
        ("p3", "x", "y"): TIE,
        ("p4", "x", "y"): A_WINS,
        ("p5", "x", "y"): TIE,
        ("p6", "x", "y"): A_WINS,
        ("p7", "x", "y"): B_WINS,
    }


def test_judge_agreement_equals_the_hand_computed_values():
    agr = judge_agreement(j1_games(), j2_games())
    # common battles p1..p6; same outcome on p1, p3, p4, p5
    assert (agr.name_x, agr.name_y, agr.n, agr.agree) == ("j1", "j2", 6, 4)
    assert agr.agreement == pytest.approx(4 / 6)
    # both decisive: p1 (agree), p4 (agree), p6 (x vs y)
    assert (agr.n_without_ties, agr.agree_without_ties) == (3, 2)
    assert agr.agreement_without_ties == pytest.approx(2 / 3)
    assert agr.confusion == [[2, 1, 0], [0, 0, 0], [0, 1, 2]]
    # symmetrised table [[2,1,0],[1,2,0],[1,1,4]]: observed 8/12, chance 1/3
    assert agr.kappa == pytest.approx(0.5)
    assert (agr.only_x, agr.only_y) == (1, 1)


def test_agreement_takes_battles_as_they_are():
    battles = [
        Battle(prompt_id="p1", model_a="y", model_b="x", outcome=B, judge="j3"),  # x wins
        Battle(prompt_id="p2", model_a="x", model_b="y", outcome=T, judge="j3"),
    ]
    agr = judge_agreement(battles, j2_games())
    assert (agr.n, agr.agree, agr.only_y) == (2, 1, 5)


LABELS_CSV = """prompt_id,model_a,model_b,winner,annotator
p1,x,y,model_a,h1
p2,y,x,model_a,h1
p3,x,y,tie (bothbad),h2
p4,y,x,model_b,h1
p4,x,y,MODEL_A,h2
p9,x,y,model_a,h1
p5,x,y,maybe,h1
p6,x,x,model_a,h1
,x,y,tie,h2
"""


def test_human_labels_are_read_with_bad_rows_counted_by_line(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text(LABELS_CSV, encoding="utf-8")
    labels = read_human_labels(path)
    assert (labels.rows, len(labels.labels), labels.bad) == (9, 6, 3)
    assert labels.errors == [
        f"{path}:8: winner 'maybe' is not one of model_a, model_b, tie, tie (bothbad)",
        f"{path}:9: model_a and model_b are both 'x'",
        f"{path}:10: empty prompt_id",
    ]
    assert labels.labels[2].winner == T and labels.labels[4].winner == A


def test_human_agreement_equals_the_hand_computed_values(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text(LABELS_CSV, encoding="utf-8")
    agr = human_agreement(j1_games(), read_human_labels(path).labels)
    # j1: p1 x, p2 tie, p3 tie, p4 x; labels: p1 x, p2 y, p3 tie, p4 x (two votes)
    assert (agr.name_x, agr.name_y, agr.n, agr.agree) == ("j1", "human", 5, 4)
    assert agr.agreement == pytest.approx(0.8)
    assert (agr.n_without_ties, agr.agree_without_ties) == (3, 3)
    # p5, p6, p7 judged without a label; the p9 label has no battle
    assert (agr.only_x, agr.only_y) == (3, 1)


def test_jsonl_labels_accept_question_id_and_name_bad_lines(tmp_path):
    path = tmp_path / "votes.jsonl"
    rows = [
        {"question_id": 81, "model_a": "x", "model_b": "y", "winner": "model_b"},
        "{not json",
        {"question_id": 82, "model_a": "x", "model_b": "y"},
        ["a", "list"],
    ]
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    labels = read_human_labels(path)
    assert [(lab.prompt_id, lab.winner) for lab in labels.labels] == [("81", B)]
    assert labels.bad == 3
    assert labels.errors[0].startswith(f"{path}:2: invalid JSON")
    assert labels.errors[1] == f"{path}:3: no winner field"
    assert labels.errors[2] == f"{path}:4: not a JSON object"


def test_a_label_file_without_a_needed_column_is_an_error(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("prompt_id,model_a,model_b,vote\np1,x,y,model_a\n", encoding="utf-8")
    with pytest.raises(ArenaError, match=r"labels\.csv: the labels lack column\(s\) winner"):
        read_human_labels(path)
    with pytest.raises(ArenaError, match="does not exist"):
        read_human_labels(tmp_path / "missing.csv")


# --------------------------------------------------------------------------- the command


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    with Store(ws) as store:
        games = j1_games() + j2_games()
        store.replace_judgments({j.judge for j in games}, games)
        store.put_answers(answers())
    return ws


def invoke(*args):
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps judge-audit a named subcommand
    return CliRunner().invoke(app, ["judge-audit", *map(str, args)])


def test_judge_audit_json_holds_the_audit_and_agreements(workspace, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text(LABELS_CSV, encoding="utf-8")
    result = invoke(workspace, "--judge", "j1", "--compare-judge", "j2", "--human", labels, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (audit,) = data["judges"]
    assert audit["judge"] == "j1" and audit["position_bias"] == pytest.approx(2 / 3)
    assert audit["order_consistency"] == pytest.approx(0.4) and audit["length_bias"] == pytest.approx(0.75)
    assert data["judge_agreement"][0]["kappa"] == pytest.approx(0.5)
    assert data["human_agreement"][0]["agreement"] == pytest.approx(0.8)
    assert data["human_labels"]["bad"] == 3
    assert "3 of 9 label rows left out" in result.stderr and "labels.csv:8" in result.stderr


def test_judge_audit_table_has_a_column_per_judge(workspace):
    result = invoke(workspace)
    assert result.exit_code == 0, result.output
    rows = {line.strip().split("  ")[0]: line.split() for line in result.stdout.splitlines() if "  " in line}
    assert rows["figure"][-2:] == ["j1", "j2"]
    assert rows["first shown wins (0.5 = no bias)"][-6:] == ["66.7%", "of", "9", "50.0%", "of", "10"]
    assert rows["same verdict in both orders"][-6:] == ["40.0%", "of", "5", "100.0%", "of", "7"]
    assert rows["others favour 1st / 2nd"][-6:] == ["2", "/", "1", "0", "/", "0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--judge", "gpt9"], "no judgments by 'gpt9' (--judge); its judges are: j1, j2"),
        (["--judge", "j1", "--compare-judge", "j1"], "both 'j1'"),
        (["--human", "nope.csv"], "does not exist"),
    ],
)
def test_judge_audit_user_errors_exit_2_with_a_message(workspace, args, message):
    result = invoke(workspace, *args)
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


def test_judge_audit_of_a_directory_that_is_not_a_workspace(tmp_path):
    result = invoke(tmp_path / "nothing")
    assert result.exit_code == 2 and "is not a workspace" in result.stderr
    assert not (tmp_path / "nothing").exists()
