"""benchmarks/bench_check.py: figures measured now against their last record in a results log.

The comparison runs on a log written here (benchmarks/results.py's own format): what is pinned is
which figures are named as regressions. The benchmarks bench_check runs are run too (the quick ones
as it runs them, the battle stage once, the report on a small workspace), to pin that each prints
every figure bench_check compares, and records them only when asked (--record).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import load_benchmark, shared

ROOT = Path(__file__).resolve().parents[1]


results = load_benchmark("results")
bench_check = load_benchmark("bench_check")


def _log(tmp_path: Path, rows: list[tuple[str, float, str]]) -> Path:
    log = tmp_path / "results.jsonl"
    for figure, value, better in rows:
        results.record(figure, value, "s", better, f"python benchmarks/x.py  # {figure}", log=log)
    return log


def _measured(figure: str, value: float, better: str):
    return results.measured(figure, value, "s", better, f"reproduce {figure}")


def test_a_figure_more_than_20_percent_worse_is_a_regression_in_its_better_direction(tmp_path):
    log = _log(tmp_path, [("stage.cold_s", 1.0, "lower"), ("stage.ratio_x", 40.0, "higher"),
                          ("stage.warm_s", 0.5, "lower"), ("stage.fast_x", 10.0, "higher")])
    changes = results.compare([
        _measured("stage.cold_s", 1.25, "lower"),   # 25% slower: named
        _measured("stage.ratio_x", 30.0, "higher"),  # 25% lower ratio: named
        _measured("stage.warm_s", 0.59, "lower"),   # 18% slower: within the tolerance
        _measured("stage.fast_x", 20.0, "higher"),  # better: never named
    ], log)
    named = {c.new.figure for c in changes if c.regressed()}
    assert named == {"stage.cold_s", "stage.ratio_x"}
    worse = {c.new.figure: round(c.worse, 3) for c in changes}
    assert worse == {"stage.cold_s": 0.25, "stage.ratio_x": 0.25, "stage.warm_s": 0.18, "stage.fast_x": -1.0}


def test_the_latest_record_is_the_baseline_and_a_new_figure_has_none(tmp_path):
    # an older, better record does not count: the latest one is the figure's current value
    log = _log(tmp_path, [("stage.cold_s", 0.5, "lower"), ("stage.cold_s", 1.0, "lower")])
    c_old, c_new = results.compare([_measured("stage.cold_s", 1.1, "lower"), _measured("other_s", 9.0, "lower")], log)
    assert c_old.old is not None and c_old.old.value == 1.0 and not c_old.regressed()
    assert c_new.old is None and c_new.worse is None and not c_new.regressed()


def test_bench_check_names_a_regression_with_its_command(tmp_path, capsys):
    log = _log(tmp_path, [("stage.cold_s", 1.0, "lower"), ("stage.warm_s", 1.0, "lower")])
    changes = results.compare([_measured("stage.cold_s", 1.5, "lower"), _measured("stage.warm_s", 1.0, "lower")], log)
    regressed = bench_check.report(changes, 0.2)
    out = capsys.readouterr().out
    assert [c.new.figure for c in regressed] == ["stage.cold_s"]
    assert "stage.cold_s" in out and "1 -> 1.5 s" in out and "REGRESSED" in out
    assert out.count("REGRESSED") == 1


def test_emitted_figures_round_trip_and_record_only_on_request(tmp_path, capsys):
    log = tmp_path / "results.jsonl"
    fig = results.emit("a_s", 1.5, "s", "lower", "python benchmarks/a.py", "note", log=log)
    assert not log.exists()  # a plain run does not append
    results.emit("b_x", 38.0, "x", "higher", "python benchmarks/b.py", record_it=True, log=log)
    got = results.parse_emitted("other output\n" + capsys.readouterr().out)
    assert [(m.figure, m.value, m.better) for m in got] == [("a_s", 1.5, "lower"), ("b_x", 38.0, "higher")]
    assert got[0] == fig  # the line holds the record as it would be written (date, commit, machine)
    (rec,) = results.history(log)
    assert (rec.figure, rec.value, rec.better, rec.command) == ("b_x", 38.0, "higher", "python benchmarks/b.py")
    with pytest.raises(ValueError, match="better must be"):
        results.emit("c", 1.0, "s", "faster", "x")  # type: ignore[arg-type]  # the mistake under test


def _bench(name: str):
    return next(b for b in bench_check.BENCHES if b.name == name)


def _printed(bench, args: tuple[str, ...]) -> set[str]:
    """Run ``bench`` with ``args`` as bench_check runs it (a subprocess) and return the figures it printed."""
    figures, _, said = bench_check.run_bench(dataclasses.replace(bench, args=args))
    assert said is not None, f"{bench.script.name} could not run"
    return {f.figure for f in figures}


def test_every_headline_benchmark_of_bench_check_takes_record():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for bench in bench_check.BENCHES:
        ran = subprocess.run([sys.executable, str(bench.script), "--help"], capture_output=True, text=True, env=env)
        assert ran.returncode == 0, (bench.script.name, ran.stderr)
        assert re.search(r"^\s+--record\s", ran.stdout, re.M), (bench.script.name, ran.stdout)


@pytest.mark.parametrize("name", ["import_grades", "ratings"])
def test_a_quick_headline_benchmark_prints_the_figures_bench_check_expects(name):
    # run with bench_check's own arguments (a few seconds each): every figure it compares is printed
    bench = _bench(name)
    assert _printed(bench, bench.args) == set(bench.figures)


@pytest.mark.slow  # 3,000 judge calls against a local server, cold then warm
def test_the_battle_stage_benchmark_prints_the_figures_bench_check_expects():
    shared("arena-hard-v0.1", "question.jsonl")
    bench = _bench("battle_stage")
    assert _printed(bench, ("--repeat", "1")) == set(bench.figures)


def test_the_report_benchmark_prints_its_figures_and_records_them_only_with_record(tmp_path, monkeypatch, capsys):
    # the script's own main at its default (headline) arguments, on a workspace of 40 prompts and 4 models
    # instead of 2,223 and 10 (the same records, built by the script's own build), recording to a log here
    mod = load_benchmark("bench_report")
    log = tmp_path / "results.jsonl"
    build = mod.build
    monkeypatch.setattr(mod, "build", lambda root, n_prompts, n_models: build(root, 40, 4))
    monkeypatch.setattr(mod, "emit", functools.partial(results.emit, log=log))
    bench = _bench("report")
    for extra in ([], ["--record"]):
        monkeypatch.setattr(sys, "argv", [str(bench.script), "--runs", "1", *extra])
        assert mod.main() == 0
        out = capsys.readouterr().out
        printed = results.parse_emitted(out)
        assert {f.figure for f in printed} == set(bench.figures), out  # the browser's too: Chromium is required
        recorded = [f.figure for f in results.history(log)]
        assert recorded == ([] if not extra else [f.figure for f in printed])


def _make_bench() -> str:
    """The Makefile's bench target with the comment above it."""
    text = (ROOT / "Makefile").read_text()
    start = text.index("# the maintained benchmarks")
    return text[start:text.index("\n\n", text.index("\nbench:", start))]


def test_every_benchmark_script_is_run_by_make_bench_or_named_there_as_run_by_hand():
    target = _make_bench()
    listed = target[target.index("BENCH_SCRIPTS :="):target.index("\nbench:")]
    runs = [word.strip('"') for word in listed.split() if word.strip('"').startswith("benchmarks/")]
    assert len(runs) >= 10, runs
    assert len(runs) == len(set(runs)) and all((ROOT / r).is_file() for r in runs), runs
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")} - {"results.py", "results_page.py"}
    unnamed = [s for s in sorted(scripts) if f"benchmarks/{s}" not in runs and s not in target]
    assert not unnamed, f"{unnamed}: run it in `make bench` or say there why it is run by hand"
    assert "bench_draws.py" not in " ".join(runs)  # three full flywheels: by hand


def test_a_retired_benchmark_is_gone_and_named_on_the_results_page_with_a_commit():
    page = load_benchmark("results_page")
    text = (ROOT / "docs" / "results.md").read_text()
    assert page.RETIRED
    for path, commit, _ in page.RETIRED:
        assert not (ROOT / path).exists(), f"{path} is retired but still there: take it out of RETIRED"
        assert f"| {commit} | `{path}` |" in text
        # where the history is at hand (not a shallow clone), the named commit has the script
        has_commit = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
        if has_commit.returncode == 0:
            assert subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=ROOT).returncode == 0, path
