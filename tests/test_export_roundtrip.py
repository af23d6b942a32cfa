"""An export re-imports to the same battles, failed games too (issue 21 item 11): a run whose judge fails
some calls (a real HTTP judge on 127.0.0.1 that gives no verdict for them), exported in arena-hard's layout
(both v0.1's question_id and v2.0's uid), imported into a fresh workspace: the same battles and win rates."""

from __future__ import annotations

import json

import yaml

from arena_learning.store import Store

from .conftest import Reply, shared
from .conftest import arena as run_arena
from .test_arena_hard import LabelJudge

BASE = "gpt-4-0314"
MODELS = (BASE, "gpt-4-0613", "gpt-3.5-turbo-0125")


class FailingJudge(LabelJudge):
    """LabelJudge that never gives a verdict on ``broken`` prompts when ``loser`` is shown first: those games fail."""

    def __init__(self, answers, verdicts, broken, loser):
        super().__init__(answers, verdicts, unsure=None)
        self.broken, self.loser = broken, loser

    def __call__(self, body):
        user = body["messages"][-1]["content"]
        if self.pids(user) & self.broken and self.shown(user, "A") == self.loser:
            return Reply("My own answer: ... I cannot decide between them.", usage=(50, 20))
        return super().__call__(body)


def arena(*args):
    proc = run_arena(*args)
    assert proc.returncode == 0, f"arena {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_export_with_failed_games_reimports_to_the_same_battles(tmp_path, scripted_server):
    root = shared("arena-hard-v0.1")
    ws = tmp_path / "ws"
    arena("ingest", root / "question.jsonl", "--out", ws)
    arena("import-answers", *sorted((root / "model_answer").glob("*.jsonl")), "-w", ws)
    with Store(ws) as store:
        answers = {(a.prompt_id, a.model): a.turns[0] for a in store.get_answers()}
        chosen = [p for p in store.get_prompts("ingested")
                  if len({answers.get((p.id, m), "")[:200] for m in MODELS}) == 3][:5]
        store.put_prompts("small", chosen)
    pids = [p.id for p in chosen]
    answers = {k: v for k, v in answers.items() if k[0] in pids}
    verdicts = {(BASE, "gpt-4-0613"): "B>A", ("gpt-4-0613", BASE): "A>>B",
                (BASE, "gpt-3.5-turbo-0125"): "A>B", ("gpt-3.5-turbo-0125", BASE): "A=B"}
    judge = FailingJudge(answers, verdicts, broken=set(pids[:2]), loser="gpt-3.5-turbo-0125")
    server = scripted_server(judge)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "ah", "prompts": {"set": "small"},
        "models": [{"name": m, "engine": "imported"} for m in MODELS],
        "battles": {"schedule": "baseline", "baseline": BASE},
        "judge": {"kind": "llm", "name": "ah", "template": "arena-hard", "combine": "both", "retries": 1,
                  "model": {"name": "judge", "engine": "openai", "model": "judge", "base_url": server.url}},
        "ratings": {"bootstrap": 50},
    }), encoding="utf-8")
    arena("battle", cfg, "-w", ws)
    with Store(ws, readonly=True) as store:
        games, battles = store.get_judgments("ah"), store.get_battles("ah")
    failed = [g for g in games if g.status != "ok"]
    assert len(games) == 20 and len(failed) == 2 and all(g.model_a == "gpt-3.5-turbo-0125" for g in failed)
    assert sum(b.games for b in battles) == 18  # each failed game left out alone, its other order kept
    head = json.loads(arena("leaderboard", ws, "--baseline", BASE, "--json").stdout)

    arena("export-judgments", ws, "--format", "arena-hard", "--out", tmp_path / "out")
    rows = [json.loads(x) for x in (tmp_path / "out" / "gpt-3.5-turbo-0125.jsonl").read_text().splitlines()]
    assert all(r["question_id"] == r["uid"] for r in rows) and {r["question_id"] for r in rows} == set(pids)
    assert sum(g["score"] is None for r in rows for g in r["games"]) == 2

    ws2 = tmp_path / "ws2"
    arena("import-judgments", *sorted((tmp_path / "out").glob("*.jsonl")), "-w", ws2, "--baseline", BASE)
    with Store(ws2, readonly=True) as store:
        again = store.get_battles("ah")

    def key(bs):
        return sorted((b.prompt_id, b.model_a, b.model_b, b.outcome, b.weight) for b in bs)

    assert key(again) == key(battles)
    head2 = json.loads(arena("leaderboard", ws2, "--baseline", BASE, "--json").stdout)
    assert [(r["model"], round(r["win_rate"], 4)) for r in head2["rows"]] == \
        [(r["model"], round(r["win_rate"], 4)) for r in head["rows"]]
