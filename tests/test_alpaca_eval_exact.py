"""`arena lc-winrate --alpaca-eval-exact`: AlpacaEval 2's LC win rate as their own code computes it.

The pinned figures came from the official alpaca_eval package (0.6.6, scikit-learn 1.9.1) run on the
rows of benchmarks/check_alpaca_eval_exact.py (which prints both side by side when given a Python that
has the package); ours equal them to every printed digit."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.errors import ArenaError
from arena_learning.rating.alpaca_exact import read_difficulty, read_gamed
from arena_learning.records import Answer, Battle, Prompt
from arena_learning.store import Store

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "check_alpaca_eval_exact.py"
# alpaca_eval's get_length_controlled_winrate on those rows: (length_controlled_v1, length_controlled_noreg)
THEIRS = {"better": (66.579452, 66.601197), "worse": (37.461663, 36.761313), "verbose": (53.858847, 50.623612),
          "padded-copy": (55.271443, 75.061455), "concise-copy": (52.659431, 32.873873)}


def check_script():
    spec = importlib.util.spec_from_file_location("check_alpaca_eval_exact", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_equal_to_the_alpaca_eval_package_with_and_without_the_gamed_rows(tmp_path):
    check = check_script()
    check.write_fixture(tmp_path)
    with_gamed, without = check.ours(tmp_path), check.ours(tmp_path, with_gamed=False)
    for model, (v1, noreg) in THEIRS.items():
        assert with_gamed[model] == pytest.approx(v1, abs=1e-6), model
        assert without[model] == pytest.approx(noreg, abs=1e-6), model
    # what the gamed rows are for: a padded copy of the baseline (truly 50) reads 75 without them, 55 with
    assert without["padded-copy"] > 70 and abs(with_gamed["padded-copy"] - 50) < 6


def alpaca_workspace(tmp_path: Path, check) -> Path:
    """A workspace holding the script's rows: 240 prompts in order, the baseline's and five models' answers."""
    annotations, _ = check.make_rows()
    base = check.BASELINE
    cfg = RunConfig.model_validate({
        "name": "ae", "prompts": {"set": "alpaca"}, "ratings": {"bootstrap": 10},
        "models": [{"name": m, "engine": "imported"} for m in (base, *check.MODELS)],
    })
    ws = tmp_path / "ws"
    with Store(ws) as store:
        n = check.N
        store.put_prompts("alpaca", [Prompt(id=f"q{i:03d}", turns=[f"instruction {i}"]) for i in range(n)])
        pipeline.save_config(cfg, store)
        pipeline.stage_prompts(cfg, store)
        first = next(iter(annotations.values()))
        store.put_answers([Answer(prompt_id=f"q{i:03d}", model=base, turns=[r["output_1"]])
                           for i, r in enumerate(first)])
        battles = []
        for model, rows in annotations.items():
            store.put_answers([Answer(prompt_id=f"q{i:03d}", model=model, turns=[r["output_2"]])
                               for i, r in enumerate(rows)])
            for i, r in reversed(list(enumerate(rows))):  # stored in another order: the rows are sorted by index
                outcome = {1.0: "model_a", 2.0: "model_b", 1.5: "tie"}[r["preference"]]
                battles.append(Battle(prompt_id=f"q{i:03d}", model_a=base, model_b=model, outcome=outcome,
                                      judge="verifier"))
        store.replace_battles("verifier", battles)
    return ws


def test_the_command_reads_their_tables_and_says_how_it_computed(tmp_path):
    check = check_script()
    check.write_fixture(tmp_path)
    ws = alpaca_workspace(tmp_path, check)
    gz = tmp_path / "df_gamed.csv.gz"
    gz.write_bytes(gzip.compress((tmp_path / "df_gamed.csv").read_bytes()))
    runner = CliRunner()
    args = ["lc-winrate", str(ws), "-r", check.BASELINE, "--alpaca-eval-exact"]
    result = runner.invoke(app, [*args, "--gamed", str(gz), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in json.loads(result.stdout)}
    for model, (v1, _) in THEIRS.items():
        assert rows[model]["lc_win_rate"] == pytest.approx(v1, abs=1e-6)
        assert rows[model]["length_slope"] == "alpaca-eval" and rows[model]["lc_low"] is None  # -b 0 by default
    assert rows["verbose"]["length_coef"] > 0  # their slope on baseline-minus-model, reported as "likes longer"
    # their instruction_difficulty.csv alone: their noreg fit
    table = tmp_path / "instruction_difficulty.csv"
    difficulty = read_gamed(tmp_path / "df_gamed.csv").difficulty
    table.write_text("index,instruction_difficulty\n" + "".join(f"{k},{v!r}\n" for k, v in difficulty.items()))
    noreg = runner.invoke(app, [*args, "--instruction-difficulty", str(table), "--json"])
    assert noreg.exit_code == 0, noreg.output
    for r in json.loads(noreg.stdout):
        assert r["lc_win_rate"] == pytest.approx(THEIRS[r["model"]][1], abs=1e-6)
    printed = runner.invoke(app, [*args, "--gamed", str(gz), "-b", "3"])
    assert printed.exit_code == 0
    assert "computed as alpaca_eval does, with their gamed rows" in " ".join(printed.stdout.split())
    assert "padded-copy *" in printed.stdout  # longer on every prompt: named, and why
    own = runner.invoke(app, [*args, "--json"])
    assert own.exit_code == 0 and len(json.loads(own.stdout)) == 5  # this workspace's difficulties
    # their tables without the flag, a table that lacks a column or an index
    plain = runner.invoke(app, ["lc-winrate", str(ws), "-r", check.BASELINE, "--gamed", str(gz)])
    assert plain.exit_code == 2 and "add --alpaca-eval-exact" in plain.output
    short = tmp_path / "short.csv"
    short.write_text("index,instruction_difficulty\n0,0.1\n1,0.2\n")
    missing = runner.invoke(app, [*args, "--instruction-difficulty", str(short)])
    assert missing.exit_code == 2 and "has no index 2" in missing.output
    assert "position in the test set" in missing.output


def test_bad_tables_name_the_file_the_row_and_what_to_give(tmp_path):
    bad = tmp_path / "df_gamed.csv"
    bad.write_text("index,preference,std_delta_len\n0,1,0.3\n")
    with pytest.raises(ArenaError, match=r"no column 'instruction_difficulty', 'not_gamed_baseline'.*df_gamed\.csv"):
        read_gamed(bad)
    bad.write_text("index,preference,std_delta_len,instruction_difficulty,not_gamed_baseline\n"
                   "0,1,0.3,0.1,False\n1,0,x,0.1,False\n")
    with pytest.raises(ArenaError, match=r"df_gamed\.csv:3: std_delta_len 'x' is not a number"):
        read_gamed(bad)
    bad.write_text("index,preference,std_delta_len,instruction_difficulty,not_gamed_baseline\n0,1,0.3,0.1,maybe\n")
    with pytest.raises(ArenaError, match="not_gamed_baseline 'maybe' is not True or False"):
        read_gamed(bad)
    # a missing preference is dropped, as their fit drops it
    bad.write_text("index,preference,std_delta_len,instruction_difficulty,not_gamed_baseline\n"
                   "0,,0.3,0.1,False\n1,1,0.2,0.4,True\n")
    g = read_gamed(bad)
    assert g.preference.tolist() == [1.0] and g.not_gamed.tolist() == [True] and g.difficulty == {0: 0.1, 1: 0.4}
    table = tmp_path / "d.csv"
    table.write_text("index,a,b\n0,1,2\n")
    with pytest.raises(ArenaError, match="expected two columns"):
        read_difficulty(table)
    table.write_text("index,d\n0,hard\n")
    with pytest.raises(ArenaError, match=r"d\.csv:2: index 0 or difficulty 'hard' is not a number"):
        read_difficulty(table)
    table.write_text("index,instruction_difficulty\n3,0.5\n")
    assert read_difficulty(table) == {3: 0.5}
