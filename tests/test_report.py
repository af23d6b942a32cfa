"""The HTML report: every section, the right numbers, and workspace text escaped."""

from __future__ import annotations

import random
from html.parser import HTMLParser

from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.records import Answer
from arena_learning.store import Store

EVIL = "<script>alert(1)</script>"


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text, self.h2 = [], [], []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_h2 = tag == "h2"

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
        pipeline.stage_battle(cfg, store, show_progress=False)
        ratings = pipeline.stage_ratings(cfg, store)
    return ws, ratings


def test_report_has_every_section_and_the_leaderboard_numbers(tmp_path):
    ws, ratings = make_workspace(tmp_path)
    result = CliRunner().invoke(app, ["report", str(ws), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    parsed = Collect()
    parsed.feed(page)
    assert parsed.h2 == ["The run", "Leaderboard", "Style control", "Win matrix", "Judge", "Tokens and cost"]
    assert "script" not in parsed.tags and EVIL not in page and "&lt;script&gt;" in page
    text = " ".join(parsed.text)
    for r in ratings:
        assert f"{r.rating:.1f}" in text and f"{r.ci_low:.0f} .. {r.ci_high:.0f}" in text
    assert "45 prompts from the built-in task suite" in text
    assert "svg" in parsed.tags and parsed.tags.count("circle") == 3


def test_report_of_a_directory_that_is_not_a_workspace(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not a workspace" in result.output
