"""The HTML report in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

The workspace is built from records (no model runs): four contestants, one with a hostile name,
30 prompts in three categories (some with two turns), answers of which some are hostile markup,
judgments in both orders with explanations, injection flags and failed verdicts. The page must
load with no console errors, show the same leaderboard as ``arena leaderboard --json``, draw
its charts, filter battles to the right counts, and show hostile texts as text, running nothing.

Chromium is a requirement of the suite, as Playwright (the dev extra) is: ``$ARENA_CHROMIUM``, else
``chromium`` on PATH (CI installs Debian's ``chromium``); without it these tests fail and say what to install.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.arena.battles import combine_games
from arena_learning.cli import app
from arena_learning.config import RunConfig
from arena_learning.records import Answer, Judgment, Prompt
from arena_learning.report.html import write_report
from arena_learning.report.serve import ReportServer
from arena_learning.store import Store

HOSTILE_MODEL = '<img src=x onerror="window.__pwned=\'name\'">'
HOSTILE_ANSWERS = [
    "<script>window.__pwned='script'</script>",
    "<img src=x onerror=\"window.__pwned='img'\">",
    "</textarea><script>window.__pwned='textarea'</script>",
    "</script><script>window.__pwned='close'</script><!--",
    "[click me](javascript:window.__pwned='md') <a href=\"javascript:window.__pwned='link'\">link</a>",
]
HOSTILE_EXPLANATION = "<svg onload=\"window.__pwned='svg'\"></svg> A is better"
HOSTILE_REASONING = "Let me think <img src=x onerror=\"window.__pwned='reasoning'\"> about it"
MODELS = ["alpha", "beta", "gamma", HOSTILE_MODEL]
CATEGORIES = ["math", "code", "writing"]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


# ---- Chromium and Playwright ---------------------------------------------------------------------


def _find_chromium() -> str | None:
    for cand in (os.environ.get("ARENA_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    """Return the Chromium binary: a requirement of the suite, as Playwright is; never installed from here."""
    path = _find_chromium()
    if path is None:
        pytest.fail("the browser tests need Chromium and this machine has none: install it (Debian: `apt-get install "
                    "-y chromium`) or set ARENA_CHROMIUM to a Chromium binary", pytrace=False)
    return path


@pytest.fixture(scope="module")  # not session: Playwright's sync API holds an event loop in this thread while open,
def browser(chromium):          # and later tests call asyncio.run()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A fresh page that records console errors and page errors."""

    def __init__(self, browser, bypass_csp: bool = False):
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp)
        self.page = self.ctx.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))

    def open(self, url: str):
        self.page.goto(url)
        self.page.wait_for_selector("html[data-ready='1']", timeout=15000)
        return self.page

    def wait_count(self, n: int, timeout: float = 5.0) -> None:
        """Wait until the battle browser shows ``n`` battles (polled from here: the page's CSP forbids eval)."""
        deadline = time.time() + timeout
        while (got := self.page.get_attribute("#bb-count", "data-count")) != str(n):
            if time.time() > deadline:
                raise AssertionError(f"the browser shows {got} battles, not {n}")
            self.page.wait_for_timeout(50)

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture
def page(browser):
    p = Page(browser)
    yield p
    p.close()


# ---- the workspace ---------------------------------------------------------------------------------


def build_workspace(root: Path) -> dict:
    """Write a workspace from records; return what the browser should show (counts per filter)."""
    rng = random.Random(7)
    cfg = RunConfig.model_validate({"name": "browser <b>test</b>", "models": [{"name": m, "engine": "imported"}
                                                                              for m in MODELS],
                                    "ratings": {"bootstrap": 20}})
    prompts = []
    for i in range(30):
        turns = [f"Question {i}: what is {i} + {i}?"] + ([f"And times two? (follow-up {i})"] if i % 5 == 0 else [])
        prompts.append(Prompt(id=f"p{i:02d}", turns=turns, category=CATEGORIES[i % 3]))
    prompts.append(Prompt(id="hostile", turns=["Show me the hostile answers</script><b>bold?</b>"], category="code"))
    skill = {m: s for m, s in zip(MODELS, (0.8, 0.6, 0.4, 0.5))}
    answers, judgments = [], []
    for p in prompts:
        for m in MODELS:
            if p.id == "hostile":
                text = [HOSTILE_ANSWERS[MODELS.index(m) % len(HOSTILE_ANSWERS)]
                        + (" " + HOSTILE_ANSWERS[4] if m == "alpha" else "")]
            else:
                text = [f"{m} says {'right' if rng.random() < skill[m] else 'wrong'} (turn {t + 1})"
                        for t in range(len(p.turns))]
            thought = [HOSTILE_REASONING] if p.id == "hostile" and m == "alpha" else []  # a reasoning model's
            answers.append(Answer(prompt_id=p.id, model=m, turns=text, tokens_in=10, tokens_out=5, reasoning=thought))
    expected = {"pairs": 0, "by_model": {m: 0 for m in MODELS}, "failed": 0, "flagged": 0, "by_cat": {}}
    for p in prompts:
        for i, a in enumerate(MODELS):
            for b in MODELS[i + 1:]:
                both_failed = p.id == "p03" and b == "gamma"  # two failed games: a row with no verdict
                one_failed = p.id == "p04" and a == "alpha"
                flagged = p.id == "hostile" or (p.id == "p07" and b == "beta")
                expected["pairs"] += 1
                expected["by_model"][a] += 1
                expected["by_model"][b] += 1
                expected["failed"] += both_failed or one_failed
                expected["flagged"] += flagged
                expected["by_cat"][p.category] = expected["by_cat"].get(p.category, 0) + 1
                for k, (first, second) in enumerate(((a, b), (b, a))):
                    sa, sb = rng.randint(3, 9), rng.randint(3, 9)
                    failed = both_failed or (one_failed and k == 1)
                    judgments.append(Judgment(
                        prompt_id=p.id, model_a=first, model_b=second, judge="verifier",
                        scores_a=[] if failed else [float(sa)], scores_b=[] if failed else [float(sb)],
                        score_a=None if failed else float(sa), score_b=None if failed else float(sb),
                        verdict=None if failed else ("model_a" if sa > sb else "model_b" if sb > sa else "tie"),
                        explanation=HOSTILE_EXPLANATION if p.id == "hostile" else f"game {k}: {sa} vs {sb}",
                        raw="<script>window.__pwned='raw'</script>" if failed else "",
                        status="failed" if failed else "ok",
                        flags=["A: instructions-to-judge: 'ignore previous'"] if flagged else []))
    with Store(root) as store:
        pipeline.save_config(cfg, store)
        store.put_prompts(pipeline.TEST_SET, prompts)
        store.put_answers(answers)
        store.replace_judgments(["verifier"], judgments)
        store.replace_battles("verifier", combine_games(judgments))
    return expected


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser") / "ws"
    expected = build_workspace(root)
    return root, expected


@pytest.fixture(scope="module")
def report(workspace, tmp_path_factory):
    root, expected = workspace
    out = tmp_path_factory.mktemp("report") / "report.html"
    write_report(root, out)
    return out, expected


# ---- tests -------------------------------------------------------------------------------------------


def test_the_report_loads_with_no_errors_and_its_leaderboard_equals_the_cli(report, workspace, page, tmp_path):
    path, _ = report
    pg = page.open(path.as_uri())
    shot = tmp_path / "report.png"
    pg.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    assert page.errors == []

    result = CliRunner().invoke(app, ["leaderboard", str(workspace[0]), "--json"])
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    rows = pg.eval_on_selector_all(
        "#leaderboard-table tbody tr",
        "trs => trs.map(tr => ({model: tr.dataset.model, cells: Array.from(tr.cells, c => c.textContent)}))")
    assert [r["model"] for r in rows] == [b["model"] for b in board]
    for row, want in zip(rows, board):
        c = row["cells"]
        assert c[0] == str(want["rank"]) and c[1] == want["model"]
        assert c[2] == f"{want['rating']:.1f}"
        assert c[3] == f"{want['ci_low']:.0f} .. {want['ci_high']:.0f}"
        assert c[4] == str(want["rank_ci"])
        assert c[5:9] == [str(want[k]) for k in ("wins", "losses", "ties", "battles")]
    assert HOSTILE_MODEL in [r["model"] for r in rows]  # the name is shown as text


def test_the_charts_are_drawn(report, page):
    pg = page.open(report[0].as_uri())
    for section, shape, least in (("#leaderboard", "circle", len(MODELS)), ("#winrates", "rect", 3 * 12),
                                  ("#groups", None, 0)):
        if shape is None:
            continue
        n = pg.eval_on_selector_all(f"{section} svg {shape}", "els => els.filter(e => { const b = e.getBBox(); "
                                    "return b.width > 0 && b.height > 0; }).length")
        assert n >= least, (section, shape, n)
    box = pg.locator("#leaderboard svg").bounding_box()
    assert box["width"] > 300 and box["height"] > 50


def test_the_strengths_view_shows_every_model_by_category_and_a_click_shows_its_battles(report, page):
    path, _ = report
    pg = page.open(path.as_uri())
    cells = pg.eval_on_selector_all("#strengths-table tbody tr", "trs => trs.map(tr => tr.cells.length)")
    assert cells == [1 + len(CATEGORIES)] * len(MODELS)
    for model, cat, battles in (("alpha", "math", 10 * 3), (HOSTILE_MODEL, "code", 11 * 3)):
        column = f"#strengths-table td.mg[data-cat='{cat}']"
        cell = pg.locator(column).nth(pg.eval_on_selector_all(column, "tds => tds.map(t => t.dataset.model)")
                                      .index(model))
        assert "Click: its battles" in cell.get_attribute("title")
        cell.click()
        page.wait_count(battles)
        assert pg.eval_on_selector("#bb-model1", "s => s.options[s.selectedIndex].text") == model
    assert page.errors == []


def test_the_battle_browser_filters_to_the_right_counts(report, page):
    path, expected = report
    pg = page.open(path.as_uri())

    def count() -> int:
        return int(pg.get_attribute("#bb-count", "data-count"))

    assert count() == expected["pairs"]
    assert pg.locator("#bb-rows tr").count() == 50  # one page, not every row
    for m in MODELS:
        pg.select_option("#bb-model1", label=m)
        assert count() == expected["by_model"][m], m
    pg.select_option("#bb-model1", label="alpha")
    pg.select_option("#bb-model2", label="beta")
    assert count() == len([1 for _ in range(31)])  # one row per prompt for a pair
    pg.select_option("#bb-model1", value="-1")
    pg.select_option("#bb-model2", value="-1")
    pg.select_option("#bb-cat", label="math")
    assert count() == expected["by_cat"]["math"]
    pg.select_option("#bb-cat", value="-1")
    pg.select_option("#bb-flag", label="failed verdict")
    assert count() == expected["failed"]
    pg.select_option("#bb-outcome", value="none")
    assert count() == 2  # p03: alpha/gamma and beta/gamma, whose every game failed
    pg.select_option("#bb-outcome", value="any")
    pg.select_option("#bb-flag", label="answer addresses the judge")
    assert count() == expected["flagged"]
    pg.select_option("#bb-flag", value="-1")
    pg.fill("#bb-search", "question 1")
    page.wait_count(66)  # prompts 1, 10..19 x 6 pairs
    pg.fill("#bb-search", "")
    page.wait_count(expected["pairs"])
    pg.click("#bb-next")
    assert pg.text_content("#bb-page") == f"page 2 of {-(-expected['pairs'] // 50)}"
    assert page.errors == []


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "without-csp"])
def test_hostile_answers_and_names_are_text_and_run_nothing(report, browser, bypass_csp):
    """Escaping alone must hold: the second run switches the page's Content-Security-Policy off."""
    page = Page(browser, bypass_csp=bypass_csp)
    try:
        _hostile(report, page)
    finally:
        page.close()


def _hostile(report, page: Page) -> None:
    pg = page.open(report[0].as_uri())
    pg.fill("#bb-search", "hostile")
    page.wait_count(6)
    rows = pg.locator("#bb-rows tr")
    seen = ""
    for k in range(rows.count()):
        rows.nth(k).click()
        pg.wait_for_selector(f"#bb-detail[data-row='{rows.nth(k).get_attribute('data-row')}']")
        seen += pg.text_content("#bb-detail")
        # nothing in the detail is markup made from data: no links, images, scripts or frames
        assert pg.eval_on_selector_all("#bb-detail a, #bb-detail img, #bb-detail script, #bb-detail svg, "
                                       "#bb-detail iframe, #bb-detail textarea", "els => els.length") == 0
    for text in [*HOSTILE_ANSWERS, HOSTILE_EXPLANATION, HOSTILE_MODEL, HOSTILE_REASONING]:
        assert text in seen, text
    # the failed game's raw reply (markup too) is text as well
    pg.fill("#bb-search", "")
    pg.select_option("#bb-outcome", value="none")
    pg.locator("#bb-rows tr").first.click()
    pg.wait_for_selector("#bb-detail pre.raw")
    assert "window.__pwned='raw'" in pg.text_content("#bb-detail pre.raw")
    pg.wait_for_timeout(300)  # give an onerror / onload handler every chance to fire
    assert pg.evaluate("typeof window.__pwned") == "undefined"
    assert pg.evaluate("document.scripts.length") == pg.evaluate(
        "document.querySelectorAll('script[type=\"application/json\"]').length + 1")
    assert page.errors == []


def test_reasoning_is_shown_folded_apart_from_the_answer(report, page):
    pg = page.open(report[0].as_uri())
    pg.fill("#bb-search", "hostile")
    page.wait_count(6)
    pg.select_option("#bb-model1", label="alpha")
    page.wait_count(3)
    pg.locator("#bb-rows tr").first.click()
    pg.wait_for_selector("#bb-detail details.reasoning")
    details = pg.locator("#bb-detail details.reasoning")
    assert details.count() == 1  # alpha's turn; its opponent gave none
    assert details.first.get_attribute("open") is None  # folded until asked for
    assert pg.text_content("#bb-detail details.reasoning summary") == "reasoning (not shown to the judge)"
    assert pg.text_content("#bb-detail details.reasoning pre") == HOSTILE_REASONING
    assert all(HOSTILE_REASONING not in t for t in pg.locator("#bb-detail pre.answer").all_text_contents())
    # Elsewhere no reasoning box at all.
    pg.fill("#bb-search", "question 1")
    page.wait_count(33)  # prompts 1, 10..19 x alpha's 3 pairs
    row = pg.locator("#bb-rows tr").first
    row.click()
    pg.wait_for_selector(f"#bb-detail[data-row='{row.get_attribute('data-row')}'] pre.answer")
    assert pg.locator("#bb-detail details.reasoning").count() == 0
    assert page.errors == []


def test_sidecar_chunks_served_by_arena_view(workspace, page, tmp_path):
    """Large reports keep their texts in chunk files; `arena view`'s server serves them on 127.0.0.1."""
    with ReportServer(workspace[0], port=0, inline_limit=0) as server:  # 0: every chunk in a sidecar file
        server.start()
        assert server.url.startswith("http://127.0.0.1:")
        assert list(server.page.parent.glob("index_files/chunk-*.js"))
        pg = page.open(server.url)
        pg.locator("#bb-rows tr").nth(3).click()
        pg.wait_for_selector("#bb-detail[data-row='3'] pre.answer")
        assert "says" in pg.text_content("#bb-detail")
    assert page.errors == []


def test_a_judge_that_failed_its_canaries_is_the_first_thing_the_page_says(browser, tmp_path, scripted_server):
    from .conftest import ARENA
    from .test_canaries import length_loving
    from .test_canaries import workspace as canary_workspace

    cfg_path, ws = canary_workspace(tmp_path, scripted_server(length_loving).url)
    # in a process of its own: Playwright's sync API holds an event loop in this thread
    done = subprocess.run([*ARENA, "battle", str(cfg_path), "-w", str(ws)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "failed its canaries" in done.stderr, done.stderr
    p = Page(browser)
    try:
        pg = p.open(write_report(ws).as_uri())
        alert = pg.locator("[role=alert]").first
        assert alert.is_visible()
        assert "failed its canaries" in alert.inner_text() and "null model win rate" in alert.inner_text()
        assert p.errors == []
    finally:
        p.close()
