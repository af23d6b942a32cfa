"""Arena-hard's judge and headline: the judge folder's prompt on real arena-hard answers, the label
parser on hand-written verdicts, strong verdicts weighted, and win rates against a baseline with
bootstrap CIs equal to values computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arena_learning.arena.battles import combine_games
from arena_learning.arena.imports import answer_from_record
from arena_learning.arena.llm_judges import LLMJudge, load_judge_spec
from arena_learning.arena.parse import LABELS, ParseError, parse_label, parse_verdict
from arena_learning.config import JudgeConfig, ModelSpec
from arena_learning.errors import ArenaError
from arena_learning.rating.baseline import baseline_win_rates
from arena_learning.rating.counts import BattleTable
from arena_learning.records import Battle, Judgment, Prompt

from .conftest import Reply, shared

JUDGE_MODEL = ModelSpec(name="j", engine="openai", model="j", base_url="http://127.0.0.1:9/v1")


def first_records(path, n):
    with path.open(encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(n)]


def test_arena_hard_judge_folder_prompts_real_arena_hard_answers_in_both_orders():
    root = shared("arena-hard-v0.1")
    question = first_records(root / "question.jsonl", 1)[0]
    answers = {}
    for model in ("gpt-4-0314", "gpt-3.5-turbo-0125"):
        recs = [json.loads(line) for line in (root / "model_answer" / f"{model}.jsonl").open(encoding="utf-8")]
        rec = next(r for r in recs if r["uid"] == question["uid"])
        answers[model] = answer_from_record(rec, model)
    spec = load_judge_spec("arena-hard")
    assert (spec.id, spec.mode, spec.parser, spec.schema_) == ("arena-hard-v1", "pairwise", "label", None)
    assert spec.sampling == {"temperature": 0.0, "max_tokens": 4096}
    # arena-hard's system prompt: the judge answers first, then one of the five labels.
    assert "Begin your evaluation by generating your own answer to the prompt" in spec.system
    for label in LABELS:
        assert f"[[{label}]]" in spec.system
    judge = LLMJudge(JudgeConfig(kind="llm", name="ah", template="arena-hard", model=JUDGE_MODEL))
    prompt = Prompt(id=question["uid"], turns=[question["prompt"]])
    base, other = answers["gpt-4-0314"], answers["gpt-3.5-turbo-0125"]
    game1 = judge.pair_messages(prompt, base, other, 0)
    game2 = judge.pair_messages(prompt, other, base, 0)
    assert game1[0] == {"role": "system", "content": spec.system}
    user1, user2 = game1[1]["content"], game2[1]["content"]
    assert user1.startswith("<|User Prompt|>\n<<<USER REQUEST ") and question["prompt"][:60] in user1
    # Game 1 shows the baseline as A; game 2 swaps (gen_judgment.py).
    a1 = user1.index("<|The Start of Assistant A's Answer|>")
    b1 = user1.index("<|The Start of Assistant B's Answer|>")
    assert base.turns[0][:80] in user1[a1:b1] and other.turns[0][:80] in user1[b1:]
    b2 = user2.index("<|The Start of Assistant B's Answer|>")
    assert other.turns[0][:80] in user2[:b2] and base.turns[0][:80] in user2[b2:]
    assert "<|The End of Assistant B's Answer|>" in user1


@pytest.mark.parametrize("text,label,scores", [
    ("My own answer: ... Both are fine.\n\nMy final verdict is tie: [[A=B]]", "A=B", (0.0, 0.0)),
    ("Assistant A is correct, B is wrong.\nMy final verdict is: Assistant A is significantly better: [[A>>B]]",
     "A>>B", (2.0, 0.0)),
    ("A slightly better. [[A>B]]", "A>B", (1.0, 0.0)),
    ("My final verdict is Assistant B is slightly better: [[B>A]]", "B>A", (0.0, 1.0)),
    ("[[B>>A]]", "B>>A", (0.0, 2.0)),
    # arena-hard's show_result.py also scores the mirrored spellings.
    ("final: [[A<B]]", "B>A", (0.0, 1.0)),
    ("final: [[B<<A]]", "A>>B", (2.0, 0.0)),
    ("final: [[B=A]]", "A=B", (0.0, 0.0)),
    # The same label twice is one verdict (arena-hard's get_score takes the set of matches).
    ("Leaning [[A>B]] ... so my final verdict is [[A>B]]", "A>B", (1.0, 0.0)),
])
def test_each_arena_hard_label_parses(text, label, scores):
    parsed = parse_verdict(text, "label")
    assert (parsed.label, parsed.scores, parsed.method) == (label, scores, "label")
    assert parsed.explanation == text.strip()


@pytest.mark.parametrize("text,error", [
    ("Assistant A is better.", "no verdict label"),
    ("My verdict: A>>B", "no verdict label"),
    ("[[A>B]] at first, but on reflection [[B>A]]", "conflicting verdict labels"),
    ("[[A>>>B]]", "unknown verdict label"),
    ("[[AB]]", "unknown verdict label"),
    ('{"score_a": 8, "score_b": 2}', "no verdict label"),
    ("[[ A>B ]]", "no verdict label"),
])
def test_malformed_arena_hard_verdicts_are_parse_errors(text, error):
    with pytest.raises(ParseError, match=error):
        parse_label(text)


def labelled(first, second, label, pid="p", judge="ah", status="ok"):
    if status != "ok":
        return Judgment(prompt_id=pid, model_a=first, model_b=second, judge=judge, status="failed")
    sa, sb = parse_label(f"[[{label}]]").scores
    v = "model_a" if sa > sb else "model_b" if sb > sa else "tie"
    return Judgment(prompt_id=pid, model_a=first, model_b=second, judge=judge, scores_a=[sa], scores_b=[sb],
                    score_a=sa, score_b=sb, verdict=v, labels=[label])


def test_strong_verdicts_count_as_strong_weight_battles():
    games = [labelled("base", "m", "B>>A"), labelled("m", "base", "A>B"),
             labelled("base", "m", "A=B", pid="q"), labelled("m", "base", "B>>A", pid="q")]
    battles = sorted(combine_games(games, mode="both", strong_weight=3), key=lambda b: (b.prompt_id, b.model_a))
    assert [(b.prompt_id, b.model_a, b.outcome, b.weight) for b in battles] == [
        ("p", "base", "model_b", 3), ("p", "m", "model_a", 1), ("q", "base", "tie", 1), ("q", "m", "model_b", 3)]
    # The mean of the games gives one battle each; a weight belongs to single games only.
    assert all(b.weight == 1 for b in combine_games(games, mode="mean", strong_weight=3))
    # Bradley-Terry counts a battle of weight 3 as three rows, as arena-hard-auto repeats it.
    table = BattleTable.from_battles(battles)
    assert table.n_battles == 8 and table.n_prompts == 2


def battle(pid, a, b, outcome, weight=1):
    return Battle(prompt_id=pid, model_a=a, model_b=b, outcome=outcome, weight=weight)


def test_baseline_win_rates_equal_hand_computed_values():
    battles = [
        # m1 against base: p1 m1 wins (shown second, weight 3) and ties; p2 loses; p3 wins.
        battle("p1", "base", "m1", "model_b", 3), battle("p1", "m1", "base", "tie"),
        battle("p2", "base", "m1", "model_a"), battle("p2", "m1", "base", "model_b"),
        battle("p3", "m1", "base", "model_a"), battle("p3", "base", "m1", "model_b"),
        # m2 against base: two ties and a strong loss.
        battle("p1", "m2", "base", "tie"), battle("p2", "base", "m2", "tie"), battle("p3", "m2", "base", "model_b", 3),
        # Battles without the baseline do not count.
        battle("p1", "m1", "m2", "model_b"),
    ]
    rows = {r.model: r for r in baseline_win_rates(battles, "base", bootstrap=0)}
    # m1: points 3*1 + 0.5 + 0 + 0 + 1 + 1 = 5.5 over weights 3+1+1+1+1+1 = 8.
    assert rows["m1"].win_rate == pytest.approx(5.5 / 8, abs=1e-12)
    assert (rows["m1"].wins, rows["m1"].ties, rows["m1"].losses, rows["m1"].prompts) == (5, 1, 2, 3)
    # m2: 0.5 + 0.5 + 0 over 1 + 1 + 3.
    assert rows["m2"].win_rate == pytest.approx(1.0 / 5, abs=1e-12)
    assert rows["base"].win_rate == 0.5 and rows["m1"].ci_low is None
    ordered = [r.model for r in baseline_win_rates(battles, "base", bootstrap=0)]
    assert ordered == ["m1", "base", "m2"]  # the baseline at 50%, in its place


def test_baseline_ci_resamples_prompts_and_equals_the_hand_computed_interval():
    # Two prompts: m's win rate is 1 on p1 (two wins) and 0.25 on p2 (a tie and a loss, 0.5 / 2).
    battles = [battle("p1", "base", "m", "model_b"), battle("p1", "m", "base", "model_a"),
               battle("p2", "base", "m", "tie"), battle("p2", "m", "base", "model_b")]
    (row, base) = baseline_win_rates(battles, "base", bootstrap=2000, seed=7)  # m at 0.625 sorts first
    assert row.win_rate == pytest.approx(1.25 / 2)
    # Drawing two prompts gives {p1, p1} (1/4), {p1, p2} (1/2) or {p2, p2} (1/4): rates 1, 0.625, 0.25.
    # The 2.5% and 97.5% points of that distribution are its ends.
    assert (row.ci_low, row.ci_high) == (0.25, 1.0)
    assert (base.model, base.win_rate, base.ci_low, base.ci_high) == ("base", 0.5, 0.5, 0.5)
    # Every prompt alike: every resample gives the same rate, so the interval is the point.
    same = [battle(f"p{i}", "m", "base", o) for i in range(5) for o in ("model_a", "tie")]
    (row, _) = baseline_win_rates(same, "base", bootstrap=200, seed=1)  # m at 0.75 sorts first
    assert row.win_rate == row.ci_low == row.ci_high == 0.75


def test_baseline_ci_is_seeded_and_matches_a_plain_loop_over_prompt_draws():
    rng = np.random.default_rng(3)
    outcomes = ["model_a", "model_b", "tie"]
    # Prompt ids sort as their numbers (p00..p29): the bootstrap draws prompts in sorted order.
    battles = [battle(f"p{i:02d}", *(("m", "base") if k % 2 else ("base", "m")), outcomes[rng.integers(3)],
                      weight=int(rng.choice([1, 3]))) for i in range(30) for k in range(2)]
    first = baseline_win_rates(battles, "base", bootstrap=300, seed=11)
    assert first == baseline_win_rates(battles, "base", bootstrap=300, seed=11)
    # The same draws, recomputed battle by battle: each round's rate over the drawn prompts.
    draws = np.random.default_rng(11).multinomial(30, np.full(30, 1 / 30), size=300)
    point = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}
    rates = []
    for counts in draws:
        num = den = 0.0
        for b in battles:
            n = counts[int(b.prompt_id[1:])] * b.weight
            num += n * (point[b.outcome] if b.model_a == "m" else 1 - point[b.outcome])
            den += n
        rates.append(num / den)
    (m,) = [r for r in first if r.model == "m"]
    assert (m.ci_low, m.ci_high) == pytest.approx(tuple(np.percentile(rates, [2.5, 97.5])), abs=1e-12)


def test_unknown_baseline_is_a_clear_error():
    with pytest.raises(ArenaError, match=r"baseline 'gpt-4' has no battles here.*base, m"):
        baseline_win_rates([battle("p", "m", "base", "tie")], "gpt-4")


# ---- end to end: the judge folder through a real HTTP judge on 127.0.0.1 --------------------------------


class LabelJudge:
    """A scripted judge (for a ScriptedServer) that writes its own answer, then a label chosen by which model's
    answer it is shown as A and as B (found by the answers' text); the first request about ``unsure`` has no label."""

    def __init__(self, answers, verdicts, unsure):
        self.answers, self.verdicts, self.unsure = answers, verdicts, unsure
        self.unlabelled = 0

    def shown(self, text, side):
        start = text.index(f"<|The Start of Assistant {side}'s Answer|>")
        block = text[start:text.index(f"<|The End of Assistant {side}'s Answer|>")]
        return next(m for (pid, m), t in self.answers.items() if t[:200] in block and pid in self.pids(text))

    def pids(self, text):
        return {pid for (pid, _), t in self.answers.items() if t[:200] in text}

    def __call__(self, body):
        user = body["messages"][-1]["content"]
        a, b = self.shown(user, "A"), self.shown(user, "B")
        label = self.verdicts[(a, b)]
        if self.unsure in self.pids(user) and a == "gpt-3.5-turbo-0125" and self.unlabelled == 0:
            self.unlabelled += 1
            text = "My own answer: it depends. Both assistants are reasonable and I cannot decide."
        else:
            text = f"My own answer: ...\n\nComparing: ...\n\nMy final verdict is: [[{label}]]"
        return Reply(text, usage=(50, 20))


def test_arena_hard_judge_end_to_end_through_a_local_http_judge(tmp_path, scripted_server):
    import yaml

    from arena_learning.store import Store

    from .conftest import arena as run_arena

    def arena(*args):
        proc = run_arena(*args)
        assert proc.returncode == 0, f"arena {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    root = shared("arena-hard-v0.1")
    ws = tmp_path / "ws"
    arena("ingest", root / "question.jsonl", "--out", ws)
    arena("import-answers", *sorted((root / "model_answer").glob("*.jsonl")), "-w", ws)
    with Store(ws) as store:
        answers = {(a.prompt_id, a.model): a.turns[0] for a in store.get_answers()}
        # Four prompts whose three answers differ in their first 200 characters (the endpoint tells them apart).
        chosen = [p for p in store.get_prompts("ingested")
                  if len({answers.get((p.id, m), "")[:200] for m in ("gpt-4-0314", "gpt-4-0613", "gpt-3.5-turbo-0125")})
                  == 3][:4]
        store.put_prompts("small", chosen)
    pids = [p.id for p in chosen]
    answers = {k: v for k, v in answers.items() if k[0] in pids}
    verdicts = {("gpt-4-0314", "gpt-4-0613"): "B>>A", ("gpt-4-0613", "gpt-4-0314"): "A>>B",
                ("gpt-4-0314", "gpt-3.5-turbo-0125"): "A>B", ("gpt-3.5-turbo-0125", "gpt-4-0314"): "A=B"}
    judge = LabelJudge(answers, verdicts, unsure=pids[0])
    server = scripted_server(judge)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "ah", "prompts": {"set": "small"},
        "models": [{"name": m, "engine": "imported"} for m in ("gpt-4-0314", "gpt-4-0613", "gpt-3.5-turbo-0125")],
        "battles": {"schedule": "baseline", "baseline": "gpt-4-0314"},
        "judge": {"kind": "llm", "name": "ah", "template": "arena-hard", "combine": "both", "retries": 1,
                  "model": {"name": "judge", "engine": "openai", "model": "judge", "base_url": server.url}},
        "ratings": {"bootstrap": 50},
    }), encoding="utf-8")
    arena("battle", cfg, "-w", ws)
    # 4 prompts x 2 contestants x 2 orders, and one re-ask of the verdict without a label.
    assert server.requests == 17 and judge.unlabelled == 1
    with Store(ws, readonly=True) as store:
        games = store.get_judgments("ah")
        battles = store.get_battles("ah")
    assert len(games) == 16 and all(g.status == "ok" and len(g.labels) == 1 for g in games)
    assert sorted({(g.model_a, g.labels[0]) for g in games}) == sorted(
        {("gpt-4-0314", "B>>A"), ("gpt-4-0613", "A>>B"), ("gpt-4-0314", "A>B"), ("gpt-3.5-turbo-0125", "A=B")})
    weights = {(b.model_a, b.model_b): b.weight for b in battles}
    assert weights[("gpt-4-0314", "gpt-4-0613")] == 3 and weights[("gpt-4-0314", "gpt-3.5-turbo-0125")] == 1
    head = json.loads(arena("leaderboard", ws, "--baseline", "gpt-4-0314", "--json").stdout)
    rates = {r["model"]: (r["win_rate"], r["ci_low"], r["ci_high"]) for r in head["rows"]}
    # gpt-4-0613 wins every game strongly; gpt-3.5 loses one game and ties the other on every prompt.
    assert rates["gpt-4-0613"] == (1.0, 1.0, 1.0)
    assert rates["gpt-3.5-turbo-0125"] == (0.25, 0.25, 0.25)
    assert [r["model"] for r in head["rows"]] == ["gpt-4-0613", "gpt-4-0314", "gpt-3.5-turbo-0125"]
    arena("export-judgments", ws, "--format", "arena-hard", "--out", tmp_path / "out")
    out = [json.loads(line) for line in (tmp_path / "out" / "gpt-4-0613.jsonl").read_text().splitlines()]
    assert len(out) == 4 and all([g["score"] for g in r["games"]] == ["B>>A", "A>>B"] for r in out)
    # The HTML report shows the same headline in its leaderboard area.
    from arena_learning.report.html import build_report

    page, _ = build_report(ws)
    table = page[page.index('id="baseline-table"'):]
    table = table[:table.index("</table>")]
    plain = table.replace(' class=""', "").replace(' class="l"', "")
    assert "gpt-4-0613</td><td>100.0</td><td>100.0 .. 100.0</td><td>4</td>" in plain


def test_a_judge_folder_whose_parser_does_not_fit_its_mode_is_refused(tmp_path):
    from arena_learning.errors import ConfigError

    (tmp_path / "judge.yaml").write_text("name: x\nmode: single\nsystem: s\ntemplate: t\nparser: label\n")
    with pytest.raises(ConfigError, match="parser 'label' does not read a single judge's verdict"):
        load_judge_spec(str(tmp_path))
