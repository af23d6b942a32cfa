"""Vote contestants (``ModelSpec.vote``): the majority rule on given samples, best-of-k by the verifier, config
errors, unchanged ledger keys for models without vote, and (slow) the real bundled model through llama.cpp:
seeded samples that repeat, a resume that asks no finished sample again, and `arena plan` counting k calls."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from arena_learning import pipeline
from arena_learning.arena.answers import turn_requests
from arena_learning.arena.vote import best_of, choose, majority, vote_key
from arena_learning.cli.main import _emit_board
from arena_learning.config import ModelSpec, RunConfig, VoteSpec, validate_config
from arena_learning.engines import build_engine
from arena_learning.engines.calls import request_key
from arena_learning.errors import ConfigError
from arena_learning.flywheel.serving import model_identity
from arena_learning.plan import plan_run
from arena_learning.records import Prompt, Rating
from arena_learning.store import Store
from arena_learning.tasks import check, generate_tasks

from .conftest import ARENA, REPO

NUMERIC = Prompt(id="n", turns=["How many minutes are in 2 hours?"], reference=["120"], checker="numeric")
LIST = Prompt(id="l", turns=["Sort 3, 1, 2."], reference=["1,2,3"], checker="list")
OPEN = Prompt(id="o", turns=["Name a colour."])


# ---- the majority rule ---------------------------------------------------------------------------------------


def test_majority_normalises_whitespace_and_case_and_keeps_the_sample_text():
    texts = ["lyon", "Paris", "  PARIS\n", "paris  "]
    assert majority(texts, OPEN) == 1  # three say paris; the stored text is the first of them, as written
    assert vote_key("  The   Big\tApple ") == vote_key("the big apple") == "the big apple"


def test_majority_breaks_a_tie_by_the_earliest_sample():
    assert majority(["8", "7", "7", "8"], OPEN) == 0
    assert majority(["blue", "red", "red", "blue", "green"], OPEN) == 0
    assert majority(["green", "red", "red", "blue", "blue"], OPEN) == 1


def test_a_numeric_answer_votes_by_its_first_number():
    # the checker says the answer is a number: "120 minutes" and "120." are the same answer
    assert majority(["100", "120 minutes", "The answer is 100 or so", "120.", "120"], NUMERIC) == 1
    assert majority(["1,000", "999", "1000.0"], NUMERIC) == 0
    # without a numeric checker, only an answer that is one number votes as a number
    assert majority(["3", "4", "3.0"], OPEN) == 0
    assert majority(["3 cats", "3 dogs", "4"], OPEN) == 0  # three different answers: the earliest wins
    # a list is not a number: its first number alone does not make two orders agree
    assert majority(["1, 3, 2", "1, 2, 3", "1, 2, 3"], LIST) == 1


def test_best_of_k_keeps_the_earliest_best_scored_sample():
    vote = VoteSpec(k=4, temperature=0.7, method="best_of_k")
    texts = ["118", "120 minutes", "120", "12"]
    assert [check(NUMERIC, [t]) for t in texts] == [0.0, 10.0, 10.0, 0.0]
    assert choose(vote, NUMERIC, [], 0, texts) == 1
    assert best_of([3.0, 7.0, 7.0]) == 1 and best_of([0.0, 0.0]) == 0
    # the majority of the same samples is another answer
    assert choose(VoteSpec(k=3, temperature=0.7), NUMERIC, [], 0, ["12", "12", "120"]) == 0


def test_best_of_k_scores_the_turn_it_answers():
    two = Prompt(id="t", turns=["What is 2 + 2?", "And 3 + 3?"], reference=["4", "6"], checker="numeric")
    vote = VoteSpec(k=3, temperature=0.7, method="best_of_k")
    assert choose(vote, two, ["4"], 1, ["4", "6", "5"]) == 1


# ---- config --------------------------------------------------------------------------------------------------

LLAMA = {"engine": "llamacpp", "model": "bundled", "mode": "completion"}


def run_config(vote: dict | None, judge: dict | None = None, engine: dict | None = None) -> dict:
    voted = {"name": "voted", **(engine or LLAMA), **({"vote": vote} if vote is not None else {})}
    return {"name": "v", "models": [{"name": "plain", **LLAMA}, voted], **({"judge": judge} if judge else {})}


@pytest.mark.parametrize(("vote", "message"), [
    ({"k": 0}, "models.1.vote.k: Input should be greater than or equal to 1"),
    ({"temperature": 0.7}, "models.1.vote.k: Field required"),
    ({"k": 5, "temperature": 0.0}, "k=5 samples at temperature 0 are k copies of one greedy answer"),
    ({"k": 5, "temperature": -1}, "models.1.vote.temperature: Input should be greater than or equal to 0"),
    ({"k": 5, "method": "best"}, "models.1.vote.method: Input should be 'majority' or 'best_of_k'"),
    ({"k": 5, "top_k": 3}, "models.1.vote.top_k: unknown key"),
])
def test_a_bad_vote_is_a_config_error_that_names_the_key(vote, message):
    with pytest.raises(ConfigError) as err:
        validate_config(run_config(vote), RunConfig, "run.yaml")
    assert "run.yaml" in str(err.value) and message in str(err.value)


def test_vote_needs_a_model_to_ask_and_best_of_k_the_verifier():
    with pytest.raises(ConfigError, match="engine 'imported' has no model to ask"):
        validate_config(run_config({"k": 3}, engine={"engine": "imported"}), RunConfig, "run.yaml")
    judge = {"kind": "llm", "model": {"name": "j", "engine": "openai", "model": "j", "base_url": "http://x/v1"}}
    with pytest.raises(ConfigError, match="best_of_k scores its samples with the verifier.*this judge is 'llm'"):
        validate_config(run_config({"k": 3, "method": "best_of_k"}, judge=judge), RunConfig, "run.yaml")
    validate_config(run_config({"k": 3}, judge=judge), RunConfig, "run.yaml")  # majority needs no reference
    voting_judge = {**judge, "model": {**judge["model"], "vote": {"k": 3}}}
    with pytest.raises(ConfigError, match="vote applies to contestants"):
        validate_config(run_config(None, judge=voting_judge), RunConfig, "run.yaml")
    for engine in ("llamacpp", "transformers", "vllm"):
        validate_config(run_config({"k": 2}, engine={"engine": engine, "model": "bundled"}), RunConfig, "run.yaml")
    validate_config(run_config({"k": 2}, engine={"engine": "openai", "model": "m", "base_url": "http://x/v1"}),
                    RunConfig, "run.yaml")


def test_best_of_k_on_prompts_without_references_stops_before_any_call(tmp_path):
    cfg = RunConfig.model_validate({**run_config({"k": 2, "method": "best_of_k"}), "prompts": {"set": "open"}})
    with Store(tmp_path / "ws") as store:
        store.put_prompts("open", [OPEN])
        with pytest.raises(pipeline.ArenaError, match="best_of_k picks samples against reference answers.*o"):
            pipeline.stage_answer(cfg, store, prompts=[OPEN], show_progress=False, skip={"plain"})
        assert store.call_counts() == {}


# ---- identities: a model without vote keeps its keys ---------------------------------------------------------

SERVED = {"name": "m", "engine": "openai", "model": "served", "base_url": "http://127.0.0.1:9/v1",
          "system_prompt": "Be brief.", "params": {"max_tokens": 8},
          "params_by_category": {"math": {"temperature": 0.3}}}


def test_a_model_without_vote_keeps_its_ledger_key_and_identity():
    spec = ModelSpec.model_validate(SERVED)
    prompt = Prompt(id="p1", turns=["What is 2 + 2?"], category="math")
    (req,) = turn_requests(spec, prompt, [], 0)
    # both values computed by the code before vote existed
    assert request_key(build_engine(spec), req) == "8f75760ed1ef91498329a49ab62bc5ebe3ca7af5fde17eec67ef97ca093ace54"
    assert model_identity(spec) == "0e87bf3e33413d8c"
    assert "vote" not in spec.model_dump()


def test_a_vote_model_has_its_own_identity_and_seeded_sample_keys():
    plain = ModelSpec.model_validate(SERVED)
    voted = ModelSpec.model_validate({**SERVED, "vote": {"k": 3, "temperature": 0.7, "seed": 10}})
    other = ModelSpec.model_validate({**SERVED, "vote": {"k": 3, "temperature": 0.7, "seed": 11}})
    assert len({model_identity(plain), model_identity(voted), model_identity(other)}) == 3
    prompt = Prompt(id="p1", turns=["What is 2 + 2?"], category="math")
    reqs = turn_requests(voted, prompt, [], 0)
    assert [(r.params["temperature"], r.params["seed"]) for r in reqs] == [(0.7, 10), (0.7, 11), (0.7, 12)]
    engine = build_engine(voted)
    assert len({request_key(engine, r) for r in reqs}) == 3
    # the samples of seed 11 and 12 are the first two of `other`: the ledger shares them
    assert [request_key(engine, r) for r in reqs[1:]] == \
        [request_key(build_engine(other), r) for r in turn_requests(other, prompt, [], 0)[:2]]


def test_the_leaderboard_marks_an_oracle(capsys):
    models = [ModelSpec.model_validate({"name": n, **LLAMA, **v}) for n, v in
              [("greedy", {}), ("vote5", {"vote": {"k": 5}}), ("best5", {"vote": {"k": 5, "method": "best_of_k"}})]]
    ratings = [Rating(model=m.name, rating=1000.0 + i) for i, m in enumerate(models)]
    _emit_board(ratings, False, models)
    out = capsys.readouterr().out
    assert "best5 (oracle)" in out and "vote5 (oracle)" not in out and "greedy (oracle)" not in out
    assert "not a fair contestant" in out
    _emit_board(ratings[:2], False, models)
    assert "oracle" not in capsys.readouterr().out


def test_arena_plan_says_k_times_the_cost_and_serve_refuses_a_vote_model(tmp_path):
    cfg = run_config({"k": 5, "method": "best_of_k"})
    cfg["tasks"] = {"n": 9}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = subprocess.run([*ARENA, "plan", str(path), "-w", str(tmp_path / "ws"), "--json"], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    answer = {x["model"]: x for x in json.loads(out.stdout)["lines"] if x["step"] == "answer"}
    assert (answer["plain"]["calls"], answer["voted"]["calls"], answer["voted"]["to_send"]) == (9, 45, 45)
    assert "5 samples per prompt: 5 x the cost" in answer["voted"]["note"]
    assert "oracle teacher" in answer["voted"]["note"] and answer["plain"]["note"] == ""
    table = subprocess.run([*ARENA, "plan", str(path), "-w", str(tmp_path / "ws")], capture_output=True, text=True,
                           cwd=REPO)
    assert table.returncode == 0 and "voted: vote best_of_k: 5 samples per prompt" in " ".join(table.stdout.split())
    serve = subprocess.run([*ARENA, "serve", "-c", str(path), "-m", "voted"], capture_output=True, text=True,
                           cwd=REPO)
    assert serve.returncode == 2 and "model 'voted' has vote" in serve.stderr


# ---- the real bundled model (slow) ---------------------------------------------------------------------------

FEW_SHOT = [["What is 12 + 7?", "19"], ["What is the capital of Japan?", "Tokyo"]]


def bundled_config(**votes: dict) -> RunConfig:
    model = {**LLAMA, "n_threads": 1, "prompt_format": {"few_shot": FEW_SHOT},
             "params": {"max_tokens": 6, "temperature": 0.0, "stop": ["\n"]}}
    return RunConfig.model_validate({"name": "vote", "models": [{"name": "greedy", **model}] + [
        {"name": name, **model, "vote": vote} for name, vote in votes.items()]})


@pytest.mark.slow
def test_a_vote_contestant_on_the_bundled_model_repeats_resumes_and_is_planned(tmp_path):
    prompts = generate_tasks(4, seed=5, categories=["arithmetic", "capitals"])
    k2 = bundled_config(vote={"k": 2, "temperature": 0.9, "seed": 3})
    k3 = bundled_config(vote={"k": 3, "temperature": 0.9, "seed": 3})
    best = bundled_config(best={"k": 3, "temperature": 0.9, "seed": 3, "method": "best_of_k"})

    plan = {x.model: x for x in plan_run(k3, None, prompts=prompts).lines if x.step == "answer"}
    assert (plan["vote"].calls, plan["vote"].cached, plan["greedy"].calls) == (12, 0, 4)
    assert "3 samples per prompt: 3 x the cost" in plan["vote"].note and "oracle" not in plan["vote"].note

    with Store(tmp_path / "a") as store:
        # an interrupted run: only the first two samples of each prompt were made
        first = pipeline.stage_answer(k2, store, prompts=prompts, show_progress=False, skip={"greedy"})
        assert first.stats["vote"].sent == 8 and store.call_counts() == {"ok": 8}
        resumed = {x.model: x for x in plan_run(k3, store, prompts=prompts).lines if x.step == "answer"}
        assert (resumed["vote"].cached, resumed["vote"].to_send) == (8, 4)
        report = pipeline.stage_answer(k3, store, prompts=prompts, show_progress=False)
        assert (report.stats["vote"].cached, report.stats["vote"].sent) == (8, 4)  # no finished sample again
        assert store.call_counts() == {"ok": 16}
        voted = {a.prompt_id: a for a in store.get_answers("vote")}
        again = pipeline.stage_answer(k3, store, prompts=prompts, show_progress=False)
        assert again.stats["vote"].sent == 0 and again.stats["greedy"].sent == 0
        assert all(x.to_send == 0 for x in plan_run(k3, store, prompts=prompts).lines if x.step == "answer")
        # best_of_k on the same samples: nothing to send, and it keeps each prompt's best-scored sample
        picked = pipeline.stage_answer(best, store, prompts=prompts, show_progress=False, skip={"greedy"})
        assert picked.stats["best"].sent == 0 and picked.stats["best"].cached == 12
        samples = [c for r in store.db.execute("SELECT response FROM calls WHERE status='ok'") for c in r]
        assert len(samples) == 16
        by_best = {a.prompt_id: a for a in store.get_answers("best")}
    engine = build_engine(k3.model("vote"))
    with Store(tmp_path / "a", readonly=True) as store:
        for p in prompts:
            reqs = turn_requests(k3.model("vote"), p, [], 0)
            texts = [store.lookup_calls([request_key(engine, r)])[request_key(engine, r)].response["text"]
                     for r in reqs]
            assert voted[p.id].turns[0] == texts[majority(texts, p)]
            assert check(p, by_best[p.id].turns) == max(check(p, [t]) for t in texts)
    # a fresh workspace samples again and gets the same answers
    with Store(tmp_path / "b") as store:
        pipeline.stage_answer(k3, store, prompts=prompts, show_progress=False, skip={"greedy"})
        assert {a.prompt_id: a.turns for a in store.get_answers("vote")} == \
            {pid: a.turns for pid, a in voted.items()}
