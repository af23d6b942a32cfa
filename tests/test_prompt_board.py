"""The board of one prompt (rating/prompt_board.py, `arena prompt-board`), on prompts of two topics whose winners
are opposite: A wins every battle on topic-1 prompts, B every battle on topic-2 prompts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arena_learning.errors import ArenaError
from arena_learning.rating.prompt_board import (
    check_k,
    held_out_scores,
    paired_gain,
    prompt_board,
    score_predictions,
)
from arena_learning.records import Battle, Prompt

MODELS = ["A", "B", "C"]
TOPIC_WORDS = {1: "Convert 3 miles to kilometres, and give the unit conversion factor used",
               2: "Write a short poem about the autumn sea and the gulls over it"}


def two_topics(per_topic: int = 12, seed: int = 0) -> tuple[list[Prompt], list[Battle], np.ndarray]:
    """Prompts t1-i / t2-i with unit embeddings around two orthogonal directions; on topic 1, A beats B beats C,
    on topic 2, B beats A beats C (every pair battles once per prompt)."""
    rng = np.random.default_rng(seed)
    prompts, battles, rows = [], [], []
    for topic in (1, 2):
        order = ["A", "B", "C"] if topic == 1 else ["B", "A", "C"]
        for i in range(per_topic):
            pid = f"t{topic}-{i}"
            prompts.append(Prompt(id=pid, turns=[f"{TOPIC_WORDS[topic]} (variant {i})"]))
            v = np.zeros(8)
            v[topic - 1] = 1.0
            v += rng.normal(0, 0.1, 8)
            rows.append(v / np.linalg.norm(v))
            for x in range(3):
                for y in range(x + 1, 3):
                    battles.append(Battle(prompt_id=pid, model_a=order[y], model_b=order[x], outcome="model_b"))
    return prompts, battles, np.array(rows, dtype=np.float32)


def test_the_board_of_a_topic_1_prompt_ranks_a_first_from_topic_1_neighbours():
    prompts, battles, emb = two_topics()
    found = prompt_board(battles, prompts, emb, emb[0], 8, bootstrap=50)
    assert found.neighbours[0].id == "t1-0" and found.neighbours[0].similarity == pytest.approx(1.0)
    assert all(n.id.startswith("t1-") for n in found.neighbours)
    assert [r.model for r in found.board] == ["A", "B", "C"]
    assert found.battles == 8 * 3 and all(r.ci_low is not None for r in found.board)
    other = prompt_board(battles, prompts, emb, emb[-1], 8, bootstrap=0)
    assert [r.model for r in other.board] == ["B", "A", "C"]
    # excluded, a prompt is never its own neighbour
    held = prompt_board(battles, prompts, emb, emb[0], 5, bootstrap=0, exclude="t1-0")
    assert "t1-0" not in [n.id for n in held.neighbours] and len(held.neighbours) == 5


def test_near_boards_predict_held_out_battles_better_than_the_global_board_when_topics_disagree():
    prompts, battles, emb = two_topics()
    scores = held_out_scores(battles, prompts, emb, [5, 23], range(len(prompts)))
    assert scores["k=5"].log_loss < scores["global"].log_loss
    assert scores["k=5"].accuracy == 1.0 and scores["k=5"].battles == 24 * 3 and scores["k=5"].unknown == 0
    gain = paired_gain(scores["k=5"], scores["global"], rounds=200)
    assert gain.log_loss_high < 0 and gain.decisive_log_loss_high < 0 and gain.accuracy_low > 0
    # with every other prompt as a neighbour the board is the global one
    assert scores["k=23"].log_loss == pytest.approx(scores["global"].log_loss)


def test_scores_count_a_tie_as_half_and_an_even_prediction_as_half_right():
    battles = [Battle(prompt_id="p", model_a="A", model_b="B", outcome=o) for o in ("model_a", "model_b", "tie")]
    s = score_predictions(np.array([0.8, 0.5, 0.5]), battles)
    assert s.accuracy == pytest.approx(0.75) and s.decisive == 2
    assert s.log_loss == pytest.approx(-(np.log(0.8) + 2 * np.log(0.5)) / 3)


def test_bad_k_and_inputs_say_what_to_do():
    prompts, battles, emb = two_topics(per_topic=3)
    with pytest.raises(ArenaError, match="1 to 6"):
        prompt_board(battles, prompts, emb, emb[0], 7)
    with pytest.raises(ArenaError, match="1 to 5"):
        prompt_board(battles, prompts, emb, emb[0], 6, exclude="t1-0")
    with pytest.raises(ArenaError, match="out of range"):
        check_k(0, 6)
    with pytest.raises(ArenaError, match="arena battle"):
        check_k(1, 0)


def _workspace(tmp_path, with_battles: bool = True):
    from arena_learning import pipeline
    from arena_learning.config import RunConfig
    from arena_learning.store import Store

    prompts, battles, _ = two_topics(per_topic=6)
    cfg = RunConfig.model_validate({"name": "p2l", "tasks": {"n": 12},
                                    "models": [{"name": m, "engine": "imported"} for m in MODELS],
                                    "judge": {"kind": "verifier"}, "ratings": {"bootstrap": 20, "seed": 1}})
    ws = tmp_path / "ws"
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        store.put_prompts(pipeline.TEST_SET, prompts)
        if with_battles:
            store.replace_battles(cfg.judge.name, [b.model_copy(update={"judge": cfg.judge.name}) for b in battles])
    return ws


def test_the_cli_refuses_bad_input_before_loading_a_model(tmp_path):
    from typer.testing import CliRunner

    from arena_learning.cli import app

    ws = _workspace(tmp_path)
    runner = CliRunner()
    cases = {("--id", "nope"): "no test prompt has this id",
             ("--id", "t1-0", "--k", "13"): "1 to 12",
             ("--id", "t1-0", "--k", "0"): "out of range",
             ("--id", "t1-0", "--prompt", "x"): "one of the two",
             (): "one of the two",
             ("--prompt", "  "): "empty",
             ("--id", "t1-0", "--judge", "other"): "no test-set battles by judge 'other'"}
    for args, message in cases.items():
        res = runner.invoke(app, ["prompt-board", str(ws), *args])
        assert res.exit_code == 2 and message in " ".join(res.output.split()), (args, res.output)
    empty = runner.invoke(app, ["prompt-board", str(_workspace(tmp_path / "e", with_battles=False)), "--id", "t1-0"])
    assert empty.exit_code == 2 and "no battles on the test set" in " ".join(empty.output.split())


@pytest.mark.slow
def test_the_cli_board_of_a_prompt_with_the_bundled_model(tmp_path):
    from typer.testing import CliRunner

    from arena_learning.cli import app

    ws = _workspace(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["prompt-board", str(ws), "--prompt", "How many kilometres are 10 miles? Use the "
                              "conversion factor.", "--k", "5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [n["id"][:3] for n in out["neighbours"]] == ["t1-"] * 5
    assert out["models"][0]["model"] == "A" and out["battles"] == 15
    table = runner.invoke(app, ["prompt-board", str(ws), "--id", "t2-3", "--k", "4"])
    assert table.exit_code == 0, table.output
    assert "t2-3" in table.stdout and "poem about the autumn sea" in table.stdout
    assert table.stdout.index(" B ") < table.stdout.index(" A ", table.stdout.index("leaderboard"))
