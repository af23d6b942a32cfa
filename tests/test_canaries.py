"""Canaries beside every LLM-judged run: a judge on 127.0.0.1 that likes long confident answers fails the null
model's canary, which the terminal, the report and harvesting then say; a fair scripted judge passes them all;
canary games enter no rating, no harvest and no export; their cost is planned."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from arena_learning import pipeline
from arena_learning.arena import canaries as cn
from arena_learning.cli import app
from arena_learning.plan import plan_run
from arena_learning.records import Answer, Judgment, Prompt
from arena_learning.store import Store

from .conftest import Reply, fenced

N = 40  # prompts; two contestants: 40 games, so audit.share 0.2 plants 2 of each of the 4 canary slots


def answer_text(i: int, model: str) -> str:
    # the contestants' answers name their topic and give details; the weak one gives fewer
    return f"About topic {i}: " + " ".join(["detail"] * (6 if model == "strong" else 3))


def length_loving(body):
    """A bad judge: the longer answer scores higher, whatever it says (the null model's answer is long)."""
    user = body["messages"][-1]["content"]
    a, b = fenced(user, "ANSWER A") or "", fenced(user, "ANSWER B") or ""
    return Reply(json.dumps({"explanation": "longer is better", "score_a": min(10, 1 + len(a) // 40),
                             "score_b": min(10, 1 + len(b) // 40)}))


def fair(body):
    """A fair judge: an answer on the question's topic scores by its details; one off the topic scores 1."""
    user = body["messages"][-1]["content"]
    topic = re.search(r"question about topic (\d+)", user)
    a, b = fenced(user, "ANSWER A") or "", fenced(user, "ANSWER B") or ""

    def score(text: str) -> int:
        on_topic = topic is not None and f"topic {topic.group(1)}:" in text
        return min(10, 2 + text.count("detail")) if on_topic else 1

    return Reply(json.dumps({"explanation": "on topic and detailed", "score_a": score(a), "score_b": score(b)}))


def workspace(tmp_path, url: str):
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(
        "name: c\nprompts: {set: open}\nratings: {bootstrap: 10}\n"
        "models:\n  - {name: strong, engine: imported}\n  - {name: weak, engine: imported}\n"
        f"judge: {{kind: llm, name: j, template: pairwise, retries: 0, model: {{name: jm, engine: openai, model: jm, "
        f"base_url: '{url}'}}}}\naudit: {{share: 0.2}}\n")
    ws = tmp_path / "ws"
    with Store(ws) as store:
        store.put_prompts("open", [Prompt(id=f"p{i}", turns=[f"A question about topic {i}."]) for i in range(N)])
        store.put_answers([Answer(prompt_id=f"p{i}", model=m, turns=[answer_text(i, m)])
                           for i in range(N) for m in ("strong", "weak")])
    return cfg_path, ws


def test_a_length_loving_judge_fails_the_null_model_and_everything_says_so(tmp_path, scripted_server):
    server = scripted_server(length_loving)
    cfg_path, ws = workspace(tmp_path, server.url)
    runner = CliRunner()
    plan = runner.invoke(app, ["plan", str(cfg_path), "-w", str(ws), "--json"])
    assert plan.exit_code == 0, plan.output
    lines = {x["step"]: x for x in json.loads(plan.stdout)["lines"]}
    assert lines["judge"]["calls"] == 2 * N and lines["canaries"]["calls"] == 16  # 8 canary games, both orders
    battle = runner.invoke(app, ["battle", str(cfg_path), "-w", str(ws)])
    assert battle.exit_code == 0, battle.output
    said = " ".join(battle.output.split())
    assert "judge 'j' failed its canaries on 'test': null model win rate 100.0% of 8 games (should be at most 10%)" \
        in said
    assert server.requests == 2 * N + 16 - 2  # the identical pairs' two orders are one prompt each: asked once
    with Store(ws, readonly=True) as store:
        (report,) = cn.stored_reports(store, "j")
        checks = {c.name: c for c in report.checks}
        assert checks["identical pairs tied"].passed and checks["truncated copy lost"].passed
        assert checks["order flip rate"].value == 0.0 and checks["order flip rate"].games == N
        assert report.null_by_variant == {cn.NULL_MODEL: 100.0, cn.NULL_JUDGE_MODEL: 100.0}
        # the canary games are kept apart: no battle and no judgment of the test set names a canary
        assert not any(m.startswith("canary:") for b in store.get_battles("j") for m in (b.model_a, b.model_b))
        assert len(store.get_judgments("j", set_name="canary/test")) == 16
    board = runner.invoke(app, ["leaderboard", str(ws), "--json"])
    assert board.exit_code == 0 and {r["model"] for r in json.loads(board.stdout)} == {"strong", "weak"}
    assert "failed its canaries" in board.stderr
    from arena_learning.report.html import write_report

    page = write_report(ws).read_text()
    assert 'role="alert"' in page and "failed its canaries" in page and "null model win rate" in page
    # harvesting from that judge is refused, unless the risk is accepted
    args = ["harvest", str(ws), "--kind", "dpo", "--prompt-set", "test", "--out", str(tmp_path / "p.jsonl"), "--k", "0",
            "--models", "strong,weak", "--selection", "all"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--accept-judge-risk" in refused.output
    taken = runner.invoke(app, [*args, "--accept-judge-risk"])
    assert taken.exit_code == 0, taken.output
    assert "canary" not in (tmp_path / "p.jsonl").read_text()


def test_a_fair_judge_passes_every_canary(tmp_path, scripted_server):
    server = scripted_server(fair)
    cfg_path, ws = workspace(tmp_path, server.url)
    result = CliRunner().invoke(app, ["battle", str(cfg_path), "-w", str(ws)])
    assert result.exit_code == 0, result.output
    assert "canaries" not in result.output
    with Store(ws, readonly=True) as store:
        (report,) = cn.stored_reports(store, "j")
        assert report.failed == [] and all(c.passed for c in report.checks), report.checks
        values = {c.name: c.value for c in report.checks}
        assert values == {"null model win rate": 0.0, "identical pairs tied": 100.0, "order flip rate": 0.0,
                          "truncated copy lost": 100.0}


def test_the_verifier_plants_none_and_a_small_run_plants_what_its_share_allows():
    prompts = [Prompt(id=f"p{i}", turns=["q"]) for i in range(3)]
    answers = [Answer(prompt_id=p.id, model=m, turns=["x y z"]) for p in prompts for m in ("a", "b")]
    assert cn.plant(prompts, answers, ["a", "b"], run_games=3, share=0.05, seed=0) == []  # 5% of 3 games: none
    tasks = cn.plant(prompts, answers, ["a", "b"], run_games=80, share=0.05, seed=0)
    assert sorted(t.answer_b.model for t in tasks) == sorted([cn.NULL_MODEL, cn.NULL_JUDGE_MODEL, cn.IDENTICAL_MODEL,
                                                              cn.TRUNCATED_MODEL])
    assert cn.truncate("one two three four") == "one two" and cn.truncate("abcdef") == "abc"
    cfg = pipeline.RunConfig.model_validate({"name": "v", "models": [{"name": "a", "engine": "imported"},
                                                                     {"name": "b", "engine": "imported"}]})
    assert not cfg.audit.enabled(cfg.judge)
    assert all(x.step != "canaries" for x in plan_run(cfg, None).lines)


def test_flips_count_twins_whose_two_orders_name_different_winners():
    def game(pid, a, b, verdict):
        return Judgment(prompt_id=pid, model_a=a, model_b=b, judge="j", verdict=verdict)

    games = [game("p1", "x", "y", "model_a"), game("p1", "y", "x", "model_a"),  # x wins, then y wins: a flip
             game("p2", "x", "y", "model_a"), game("p2", "y", "x", "model_b"),  # x both times
             game("p3", "x", "y", "tie"), game("p3", "y", "x", "model_a"),      # a tie is no flip
             game("p4", "x", "y", "model_a")]                                   # one order only: no twin
    assert cn.flips(games) == (1, 3)
    checked = cn._check("flips", 1, 3, threshold=25.0, at_most=True)  # Wilson 95% interval, in percent
    assert checked.ci_low is not None and checked.ci_high is not None and checked.ci_low < 100 / 3 < checked.ci_high
    assert checked.passed is False
    empty = cn._check("flips", 0, 0, threshold=25.0, at_most=True)
    assert (empty.value, empty.ci_low, empty.ci_high, empty.passed) == (None, None, None, None)


@pytest.mark.parametrize("value,failed", [(5.0, False), (30.0, True)])
def test_a_report_round_trips_through_the_store(tmp_path, value, failed):
    report = cn.CanaryReport(judge="j", set_name="test", calls=4, checks=[
        cn.Check(name="order flip rate", value=value, games=20, ci_low=1.0, ci_high=50.0, threshold=25.0,
                 passed=value <= 25.0, rule="at most 25%")])
    with Store(tmp_path / "ws") as store:
        store.set_meta("canaries/j/test", report.as_dict())
        store.set_meta("canaries/J/test", {**report.as_dict(), "judge": "J"})  # another judge (case matters)
        (back,) = cn.stored_reports(store, "j")
        assert back == report
        assert (cn.judge_risk_error(store, "j") is not None) == failed


def test_harvest_lineage_names_the_judge_and_the_battles_behind_each_row(tmp_path, scripted_server):
    server = scripted_server(fair)
    cfg_path, ws = workspace(tmp_path, server.url)
    runner = CliRunner()
    assert runner.invoke(app, ["battle", str(cfg_path), "-w", str(ws)]).exit_code == 0
    out = tmp_path / "pairs.jsonl"
    res = runner.invoke(app, ["harvest", str(ws), "--kind", "dpo", "--prompt-set", "test", "--out", str(out),
                              "--k", "0", "--models", "strong,weak", "--lineage"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == N and all(r["judge"] == "j" for r in rows)
    for r in rows:
        (b,) = r["battles"]  # the one battle of the pair on this prompt, with its verdict and scores
        assert {b["model_a"], b["model_b"]} == {"strong", "weak"} and b["outcome"] in ("model_a", "model_b")
        assert r["chosen_model"] == "strong" and b["score_a"] is not None
    # the old spelling `--set NAME` still names the prompt set, with a deprecation message (every other --set is
    # key=value); given beside a different --prompt-set it is an error
    old = tmp_path / "old.jsonl"
    res = runner.invoke(app, ["harvest", str(ws), "--kind", "dpo", "--set", "test", "--out", str(old), "--k", "0",
                              "--models", "strong,weak", "--lineage"])
    assert res.exit_code == 0, res.output
    assert "deprecated" in res.stderr and "--prompt-set test" in res.stderr
    assert old.read_text() == out.read_text()
    both = runner.invoke(app, ["harvest", str(ws), "--set", "test", "--prompt-set", "flywheel/D1", "--out", str(old)])
    assert both.exit_code == 2 and "use --prompt-set alone" in both.output


def test_a_board_has_a_manifest_and_compare_says_first_when_judges_differ(tmp_path, scripted_server):
    runner = CliRunner()
    spaces = []
    for name, script in (("a", fair), ("b", length_loving)):
        folder = tmp_path / name
        folder.mkdir()
        cfg_path, ws = workspace(folder, scripted_server(script).url)
        assert runner.invoke(app, ["battle", str(cfg_path), "-w", str(ws)]).exit_code == 0
        spaces.append(ws)
    res = runner.invoke(app, ["leaderboard", str(spaces[1]), "--manifest"])
    assert res.exit_code == 0, res.output
    m = json.loads(res.stdout)
    assert m["judge"]["name"] == "j" and m["judge"]["template"].startswith("pairwise-v")
    assert len(m["judge"]["template_hash"]) == 16 and m["judge"]["model"]["endpoints"]
    assert m["test_set"]["prompts"] == N and len(m["test_set"]["hash"]) == 16 and m["models"] == ["strong", "weak"]
    assert m["canaries"] == [{"set": "test", "failed": ["null model win rate"]}]
    assert m["program"].startswith("arena-learning ")
    other = json.loads(runner.invoke(app, ["leaderboard", str(spaces[0]), "--manifest"]).stdout)
    assert other["test_set"] == m["test_set"] and other["judge"] != m["judge"]  # same prompts, another server
    compared = runner.invoke(app, ["compare", str(spaces[0]), str(spaces[1])])
    assert compared.exit_code == 0, compared.output
    note = " ".join(compared.stderr.split())
    assert "and the reference" in note and "the judges differ (model)" in note and "not like for like" in note
    from arena_learning.report.html import write_report

    assert "Manifest" in write_report(spaces[0]).read_text()
    # the other boards carry it too: the baseline headline and the scores (a single-answer judge: here none)
    head = runner.invoke(app, ["leaderboard", str(spaces[1]), "--baseline", "weak", "--json"])
    assert head.exit_code == 0 and json.loads(head.stdout)["manifest"] == m
    # ... in the terminal, one line under each table; beside a CSV, as NAME.manifest.json
    board = runner.invoke(app, ["leaderboard", str(spaces[1]), "--csv", str(tmp_path / "board.csv")])
    line = " ".join(board.stdout.split())
    assert board.exit_code == 0 and "manifest: judge j (llm, openai " in line, board.output
    assert f"test set {N} prompts, {N} turns, #{m['test_set']['hash']}" in line
    assert "canaries FAILED: null model win rate" in line and m["judge"]["template_hash"] in line
    assert json.loads((tmp_path / "board.manifest.json").read_text()) == m
    head = runner.invoke(app, ["leaderboard", str(spaces[1]), "--baseline", "weak"])
    assert f"#{m['test_set']['hash']}" in " ".join(head.stdout.split())


def concise(body):
    """Another taste: the shorter answer scores higher."""
    user = body["messages"][-1]["content"]
    a, b = fenced(user, "ANSWER A") or "", fenced(user, "ANSWER B") or ""
    return Reply(json.dumps({"explanation": "shorter is better", "score_a": 10 - min(9, len(a) // 10),
                             "score_b": 10 - min(9, len(b) // 10)}))


def test_reanchor_maps_the_old_judges_ratings_to_a_new_judges_and_names_the_ranks_it_moves(tmp_path,
                                                                                          scripted_server):
    old = scripted_server(fair)
    cfg_path, ws = workspace(tmp_path, old.url)
    runner = CliRunner()
    assert runner.invoke(app, ["battle", str(cfg_path), "-w", str(ws)]).exit_code == 0
    new = scripted_server(concise)
    judge_file = tmp_path / "new.yaml"
    judge_file.write_text(f"judge: {{kind: llm, name: terse, template: pairwise, retries: 0, model: {{name: tm, "
                          f"engine: openai, model: tm, base_url: '{new.url}'}}}}\n")
    res = runner.invoke(app, ["reanchor", str(ws), str(judge_file), "--anchors", "12", "-b", "20", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["old_judge"] == "j" and out["new_judge"] == "terse" and out["anchors"] == 12
    assert new.requests == 2 * 12  # the anchors, in both orders, and nothing else
    rows = {r["model"]: r for r in out["rows"]}
    assert rows["strong"]["rank_old"] == 1 and rows["strong"]["rank_new"] == 2  # the terse judge prefers "weak"
    assert sorted(out["moved"]) == ["strong", "weak"] and out["b"] < 0  # the map reverses the order
    assert rows["strong"]["old"] is not None
    table = runner.invoke(app, ["reanchor", str(ws), str(judge_file), "--anchors", "12", "-b", "0"])
    assert table.exit_code == 0 and "ranks the change of judge would move: strong, weak" in table.stdout
    assert new.requests == 2 * 12  # the second time, the ledger answers
    with Store(ws, readonly=True) as store:
        assert {b.judge for b in store.get_battles()} == {"j"}  # the board's battles are the old judge's alone
    same = tmp_path / "same.yaml"
    same.write_text(f"judge: {{kind: llm, name: j, model: {{name: tm, engine: openai, model: tm, base_url: "
                    f"'{new.url}'}}}}\n")
    clash = runner.invoke(app, ["reanchor", str(ws), str(same)])
    assert clash.exit_code == 2 and "give it a name of its own" in clash.output


def test_the_battle_stage_judges_games_and_canaries_on_one_event_loop_and_one_http_session(tmp_path, scripted_server,
                                                                                           monkeypatch):
    import asyncio

    from arena_learning.engines.openai_compat import OpenAIEngine

    server = scripted_server(fair)
    cfg_path, ws = workspace(tmp_path, server.url)
    seen: list[tuple[object, object]] = []  # (event loop, session) of every call the judge engine sent
    get_session = OpenAIEngine._get_session

    def spying(self):
        session = get_session(self)
        seen.append((asyncio.get_running_loop(), session))
        return session

    monkeypatch.setattr(OpenAIEngine, "_get_session", spying)
    result = CliRunner().invoke(app, ["battle", str(cfg_path), "-w", str(ws)])
    assert result.exit_code == 0, result.output
    # every game and every canary was asked (the identical pairs' two orders share one call) ...
    assert len(seen) == server.requests == 2 * N + 16 - 2
    with Store(ws, readonly=True) as store:
        assert len(store.get_judgments("j", set_name="canary/test")) == 16
        assert len(store.get_judgments("j", set_name="test")) == 2 * N
        (report,) = cn.stored_reports(store, "j")
        assert report.failed == []
    # ... on one loop and one session, closed when the stage ended
    assert len({id(loop) for loop, _ in seen}) == 1
    sessions = {id(s): s for _, s in seen}
    assert len(sessions) == 1 and all(s.closed for s in sessions.values())


def test_a_judge_session_cancels_what_an_interrupted_batch_left_and_closes_its_engines():
    import asyncio

    from arena_learning.arena.judges import judge_session

    class Engine:  # stands for a judge engine: the session helper is what is tested, not a model
        keep_open = False
        closed = False

        async def aclose(self):
            self.closed = True

    class Judge:
        def __init__(self):
            self.engine = Engine()

        def engines(self):
            return [self.engine]

    judge = Judge()
    left: list[asyncio.Task] = []

    async def batch():
        left.append(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))  # a call still in flight
        raise KeyboardInterrupt  # the user's Ctrl-C in the middle of a batch

    with pytest.raises(KeyboardInterrupt), judge_session(judge) as run:
        assert judge.engine.keep_open
        run(batch())
    assert left[0].cancelled() and judge.engine.closed and not judge.engine.keep_open
