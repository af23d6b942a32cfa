"""The HTML report: every section, the right numbers, and workspace text escaped."""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser

from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.records import Answer
from arena_learning.report.html import write_report
from arena_learning.store import Store

EVIL = "<script>alert(1)</script>"


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text, self.h2, self.scripts = [], [], [], []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_h2 = tag == "h2"
        if tag == "script":
            self.scripts.append(dict(attrs))

    def handle_endtag(self, tag):
        self._in_h2 = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_h2:
            self.h2.append(data)


def make_workspace(tmp_path):
    skill = {"weak": 0.2, "mid": 0.5, EVIL: 0.8}
    cfg = RunConfig.model_validate({
        "name": "rep", "tasks": {"n": 45, "seed": 1},
        "models": [{"name": m, "engine": "imported"} for m in skill],
        "ratings": {"bootstrap": 20},
    })
    ws = tmp_path / "ws"
    with Store(ws) as store:
        pipeline.save_config(cfg, store)
        prompts = pipeline.stage_prompts(cfg, store)
        rng = random.Random(3)
        store.put_answers(
            Answer(prompt_id=p.id, model=m, turns=[(p.reference[0] if rng.random() < s else "no idea")
                                                   + ("\n- a list item" if m == "mid" else "")])
            for p in prompts for m, s in skill.items())
        pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
        ratings = pipeline.stage_ratings(cfg, store)
    return ws, ratings


def test_report_has_every_section_and_the_leaderboard_numbers(tmp_path):
    ws, ratings = make_workspace(tmp_path)
    result = CliRunner().invoke(app, ["report", str(ws), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    parsed = Collect()
    parsed.feed(page)
    assert parsed.h2 == ["The run", "Leaderboard", "Style control", "Win rates", "By category and subset",
                         "Strengths and weaknesses", "Judge", "Battles", "Tokens and cost"]
    # one script (the report's own, allowed by its hash); every other block is JSON data
    assert [a.get("type") for a in parsed.scripts].count(None) == 1
    assert all(a.get("type") in (None, "application/json") for a in parsed.scripts)
    assert "Content-Security-Policy" in page and "'sha256-" in page
    assert EVIL not in page and "&lt;script&gt;" in page
    text = " ".join(parsed.text)
    for r in ratings:
        assert f"{r.rating:.1f}" in text and f"{r.ci_low:.0f} .. {r.ci_high:.0f}" in text
    assert "45 prompts from the built-in task suite" in text
    assert "svg" in parsed.tags and parsed.tags.count("circle") == 3


def test_report_of_a_directory_that_is_not_a_workspace(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not a workspace" in result.output


def test_json_blocks_cannot_be_closed_by_data():
    from arena_learning.report.browser import json_for_html

    text = json_for_html({"a": "</script><script>x()</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><script>x()</script><!-- & \u2028"}


def test_categories_clusters_and_flywheel_rounds_when_the_workspace_has_them(tmp_path):
    ws, ratings = make_workspace(tmp_path)
    page = (tmp_path / "plain.html")
    write_report(ws, page)
    assert "Test set clusters" not in page.read_text() and "Flywheel rounds" not in page.read_text()
    with Store(ws) as store:
        prompts = store.get_prompts("test")
        # a prompt of cluster c1 carries markup: it is c1's sample prompt and a point's hover text
        prompts[0] = prompts[0].model_copy(update={"turns": [f"planted {EVIL} prompt"], "cluster": "c1"})
        store.put_prompts("test", prompts)
        store.set_meta("testset/cluster_map", {"method": "pca", "n_total": 60, "points": [
            {"id": prompts[i].id if i < len(prompts) else f"x{i}", "x": i % 7, "y": i // 7, "cluster": f"c{i % 3}",
             "selected": i < len(prompts)} for i in range(60)]})
        store.set_meta("testset/per_cluster", [{"cluster": f"c{k}", "size": 20, "diverse": 5, "hard": 2, "mix": 7,
                                                "difficulty": 4.5, "example": f"example <b>{k}</b>"} for k in range(3)])
    fw = ws / "flywheel"
    (fw / "round-0" / "0-sft").mkdir(parents=True)
    (fw / "round-0" / "0-sft" / "losses.json").write_text(json.dumps(
        {"done": True, "log": [{"step": s, "loss": 2.0 / s} for s in range(1, 6)] + [{"train_runtime": 3}]}))
    rating = {"rating": 1010.0, "ci_low": 990.0, "ci_high": 1030.0}
    (fw / "state.json").write_text(json.dumps({
        "stages": {"r0.0-sft": {"key": "r0.0-sft", "round": 0, "kind": "sft", "status": "done",
                                "by_model": {"ref-<i>a</i>": 12, "ref-b": 3}, "train_loss": 0.7}},
        "slices": {"D1": {"prompts": 20, "allocation": {
            "by": "category", "stage": "r1.0-sft", "model": "student-r0-sft", "best": "ref-b", "floor": 5,
            "basis": "x", "why": "1 of 2 groups behind ref-b", "groups": [
                {"group": "<b>yes_no</b>", "prompts": 15, "uniform": 10, "candidates": 40, "gap": -150.0,
                 "ci_low": -220.0, "ci_high": -80.0, "verdict": "behind"},
                {"group": "dates", "prompts": 5, "uniform": 10, "candidates": 40, "gap": 20.0, "verdict": ""}]}},
            "D2": {"prompts": 20, "allocation": {
                "rule": "learnable", "by": "category", "stage": "r2.0-sft", "model": "student-r1-sft", "best": "ref-b",
                "floor": 5, "basis": "y", "why": "gaps times movement", "groups": [
                    {"group": "counting", "prompts": 15, "uniform": 10, "candidates": 40, "gap": -90.0,
                     "verdict": "", "moved": 0.375},
                    {"group": "dates", "prompts": 5, "uniform": 10, "candidates": 40, "gap": -20.0, "verdict": "",
                     "moved": -0.125}]}}},
        "evaluations": [{"after": "start", "ratings": [{"model": "student", "rating": 980.0}]},
                        {"after": "round 0", "ratings": [{"model": "student-r0-sft", "rating": 1010.0}]}],
        "last_report": {"rounds": [{"round": 0, "model": "student-r0-sft", **rating, "sft_examples": 15,
                                    "dpo_pairs": 0, "rm_pairs": 0, "train_loss": 0.7, "stages": ["sft"]}],
                        "references": [{"model": "ref-<i>a</i>", "rating": 1000.0, "ci_low": 985.0, "ci_high": 1015.0}],
                        "base": {"model": "student-base", "rating": 970.0, "ci_low": 950.0, "ci_high": 990.0}}}))
    result = CliRunner().invoke(app, ["report", str(ws), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r.html").read_text()
    parsed = Collect()
    parsed.feed(text)
    assert "Test set clusters" in parsed.h2 and "Flywheel rounds" in parsed.h2
    assert parsed.tags.count("circle") >= 3 + 60 + 3  # CI plot, cluster points, legend
    # sample prompts, escaped: c0 and c2 show their stored example, c1 its planted prompt (table and hover)
    assert "example &lt;b&gt;0&lt;/b&gt;" in text and "example &lt;b&gt;2&lt;/b&gt;" in text
    assert "example <b>" not in text and "example &lt;b&gt;1&lt;/b&gt;" not in text
    assert text.count("planted &lt;script&gt;alert(1)&lt;/script&gt; prompt") == 2 and EVIL not in text
    assert "ref-&lt;i&gt;a&lt;/i&gt;" in text and "<i>a</i>" not in text
    assert "polyline" in parsed.tags  # the loss curve
    joined = " ".join(parsed.text)
    assert "round 0: student-r0-sft" in joined and "1010.0" in joined
    # per category: one column per task category, each with its battle count
    assert "arithmetic (15)" in joined
    # an aimed slice: how it spent its prompts, its groups' names escaped
    assert "Slice D1: allocate: weakness, drawn by r1.0-sft for student-r0-sft" in joined
    assert "&lt;b&gt;yes_no&lt;/b&gt;" in text and "<b>yes_no</b>" not in text and "-150.0" in joined
    # a learnable slice shows how training moved the model per group; a weakness slice has no such column
    assert "Slice D2: allocate: learnable, drawn by r2.0-sft for student-r1-sft" in joined
    assert joined.count("moved by training") == 1 and "+0.38" in joined and "-0.12" in joined


def test_large_texts_go_to_sidecar_chunks_and_a_rewrite_drops_stale_ones(tmp_path):
    ws, _ = make_workspace(tmp_path)
    out = tmp_path / "my report.html"
    write_report(ws, out, inline_limit=0)
    chunks = sorted((tmp_path / "my_report_files").glob("chunk-*.js"))
    assert chunks and chunks[0].read_text().startswith('arenaChunk("')
    assert 'id="arena-chunk-0"' not in out.read_text()
    write_report(ws, out)  # small enough: inline again, the folder goes
    assert not (tmp_path / "my_report_files").exists() and 'id="arena-chunk-0"' in out.read_text()


def test_view_serves_the_report_on_localhost(tmp_path):
    import urllib.request

    from arena_learning.report.serve import ReportServer

    ws, _ = make_workspace(tmp_path)
    with ReportServer(ws, port=0) as server:
        server.start()
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            body = resp.read().decode()
        assert "Arena report: rep" in body and 'id="bb-rows"' in body
    assert not server.page.exists()  # the temporary folder is gone; the workspace got nothing
    assert not (ws / "report.html").exists()
    result = CliRunner().invoke(app, ["view", str(tmp_path)])
    assert result.exit_code == 2 and "not a workspace" in result.output
