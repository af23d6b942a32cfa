"""A judge never grades itself: the same endpoint model or the same weights as a contestant is refused before
any call; a judge of the same family is warned about with that family's win rate against the others."""

from __future__ import annotations

import pytest

from arena_learning import pipeline
from arena_learning.arena.self_judging import (
    SelfPreferenceWarning,
    check_self_judging,
    family,
    self_preference,
    stem,
)
from arena_learning.config import JudgeConfig, ModelSpec, RunConfig
from arena_learning.errors import ArenaError
from arena_learning.records import Answer, Battle, Prompt
from arena_learning.store import Store

from .test_judge_runs import scripted_judge  # the judge tests' scripted judge: the answer with "good" wins


def endpoint(name: str, model: str, url: str = "http://127.0.0.1:9/v1", **kw) -> ModelSpec:
    return ModelSpec(name=name, engine="openai", model=model, base_url=url, **kw)


def llm_judge(model: ModelSpec, name: str = "j") -> JudgeConfig:
    return JudgeConfig(kind="llm", name=name, model=model)


def test_name_stems_and_families():
    assert stem("meta-llama/Meta-Llama-3-70B-Instruct") == stem("/models/Meta-Llama-3-8B-Instruct") == "llama"
    assert stem("gpt-4-turbo") == stem("gpt4_1106_preview") == stem("GPT-3.5-turbo") == "gpt"
    assert stem("Qwen/Qwen2-72B-Instruct") == "qwen" and stem("mistralai/Mixtral-8x22B-Instruct-v0.1") == "mixtral"
    assert stem("claude-3-opus") == "claude" and stem("vicuna-33b-v1.3") == "vicuna"
    assert family(endpoint("a", "my-finetune", family="Llama")) == "llama"  # a set family wins over the name
    assert family(ModelSpec(name="gpt-4-0314", engine="imported")) == "gpt"  # an import: its name


def test_the_same_endpoint_model_or_the_same_weights_is_refused():
    judge = llm_judge(endpoint("judge", "qwen-72b", "http://host:8000/v1/"))
    with pytest.raises(ArenaError, match=r"judge 'j' grades itself: its model and contestant 'me' are the same "
                                         r"endpoint model \('qwen-72b' at http://host:8000/v1\)"):
        check_self_judging(judge, [endpoint("other", "llama-8b", "http://host:8000/v1"),
                                   endpoint("me", "qwen-72b", ["http://x:1/v1", "http://HOST:8000/v1"])])
    # the same model name on another server is another deployment: a family, not an identity
    assert check_self_judging(judge, [endpoint("me", "qwen-72b", "http://other:8000/v1")]) == {"j": ["me"]}
    bundled = ModelSpec(name="g", engine="llamacpp", model="bundled")
    with pytest.raises(ArenaError, match="the same weights"):
        check_self_judging(llm_judge(ModelSpec(name="judge", engine="llamacpp", model="bundled")), [bundled])
    # a panel member counts as a judge
    panel = JudgeConfig(kind="panel", name="p", members=[llm_judge(endpoint("a", "x"), "a"),
                                                         llm_judge(endpoint("b", "qwen-72b"), "b")])
    with pytest.raises(ArenaError, match="judge 'b' grades itself"):
        check_self_judging(panel, [endpoint("me", "qwen-72b")])
    # imported answers: nothing runs them, so only their family can match
    assert check_self_judging(llm_judge(endpoint("judge", "gpt-4-1106-preview")),
                              [ModelSpec(name="gpt-4-0314", engine="imported"),
                               ModelSpec(name="claude-2", engine="imported")]) == {"j": ["gpt-4-0314"]}
    assert check_self_judging(JudgeConfig(), [bundled]) == {}  # the verifier runs no model


def test_self_preference_is_the_familys_points_against_the_others():
    battles = [Battle(prompt_id="p1", model_a="gpt-4", model_b="claude", outcome="model_a"),
               Battle(prompt_id="p2", model_a="claude", model_b="gpt-4", outcome="tie"),
               Battle(prompt_id="p3", model_a="gpt-4", model_b="gpt-3.5", outcome="model_b"),  # within: left out
               Battle(prompt_id="p4", model_a="llama", model_b="gpt-3.5", outcome="model_b", weight=2)]
    sp = self_preference("j", "gpt", ["gpt-4", "gpt-3.5"], battles)
    assert (sp.battles, sp.win_rate) == (4, pytest.approx(100 * 3.5 / 4))
    assert self_preference("j", "x", ["nobody"], battles).win_rate is None


def test_a_run_refuses_before_any_call(tmp_path):
    prompts = [Prompt(id=f"p{i}", turns=[f"q{i}"]) for i in range(3)]
    models = [{"name": "gpt-3.5-turbo", "engine": "imported"}, {"name": "claude-2", "engine": "imported"}]

    def cfg(judge_model: dict) -> RunConfig:
        return RunConfig.model_validate({"name": "s", "prompts": {"set": "open"}, "models": models,
                                         "judge": {"kind": "llm", "name": "j", "model": judge_model}})

    with Store(tmp_path / "ws") as store:
        store.put_prompts("open", prompts)
        c = cfg({"name": "judge", "engine": "openai", "model": "gpt-4", "base_url": "http://127.0.0.1:9/v1"})
        pipeline.stage_prompts(c, store)
        store.put_answers([Answer(prompt_id=p.id, model=m["name"], turns=["a"]) for p in prompts for m in models])
        # a contestant served by the judge's own endpoint model: refused, no call made (port 9 would fail)
        me = cfg({"name": "judge", "engine": "openai", "model": "gpt-3.5-turbo", "base_url": "http://127.0.0.1:9/v1"})
        me.models[0] = ModelSpec(name="gpt-3.5-turbo", engine="openai", model="gpt-3.5-turbo",
                                 base_url="http://127.0.0.1:9/v1")
        with pytest.raises(ArenaError, match="grades itself"):
            pipeline.stage_battle(me, store, prompts=prompts, show_progress=False)
        assert store.get_judgments("j") == []


def test_a_run_with_a_judge_of_the_same_family_warns_with_the_win_rate(tmp_path, scripted_server):
    url = scripted_server(scripted_judge).url
    prompts = [Prompt(id=f"p{i}", turns=[f"q{i}"]) for i in range(4)]
    cfg = RunConfig.model_validate({
        "name": "s", "prompts": {"set": "open"},
        "models": [{"name": "gpt-3.5-turbo", "engine": "imported"}, {"name": "claude-2", "engine": "imported"}],
        "judge": {"kind": "llm", "name": "j", "retries": 0,
                  "model": {"name": "judge", "engine": "openai", "model": "gpt-4", "base_url": url}}})
    with Store(tmp_path / "ws") as store:
        store.put_prompts("open", prompts)
        pipeline.stage_prompts(cfg, store)
        store.put_answers([Answer(prompt_id=p.id, model=m, turns=["a good one" if m == "claude-2" else "meh"])
                           for p in prompts for m in ("gpt-3.5-turbo", "claude-2")])
        with pytest.warns(SelfPreferenceWarning, match=r"judge 'j' is of the 'gpt' family, as gpt-3.5-turbo: .*won "
                                                       r"\d+\.\d% of \d+ battles"):
            report = pipeline.stage_battle(cfg, store, prompts=prompts, show_progress=False)
        pipeline.save_config(cfg, store)
    (sp,) = report.self_preference
    assert sp.family == "gpt" and sp.models == ["gpt-3.5-turbo"] and sp.battles == len(report.battles) == 4
    assert sp.win_rate == 0.0  # the scripted judge prefers the other family's "good" answers: no self-preference
    from arena_learning.report.html import write_report

    page = write_report(tmp_path / "ws").read_text()
    assert "Self-preference" in page and "gpt-3.5-turbo" in page and "0.0%" in page


def test_the_same_weights_under_another_path_are_the_same_model_and_one_model_may_be_allowed_to_judge_itself(
        tmp_path):
    a, b, c = tmp_path / "a.gguf", tmp_path / "copy.gguf", tmp_path / "other.gguf"
    a.write_bytes(b"GGUF" + bytes(range(200)))
    b.write_bytes(a.read_bytes())
    c.write_bytes(b"GGUF" + bytes(reversed(range(200))))
    judge = llm_judge(ModelSpec(name="judge", engine="llamacpp", model=str(a)))
    with pytest.raises(ArenaError, match="the same weights .*audit.allow_self_judging"):
        check_self_judging(judge, [ModelSpec(name="me", engine="llamacpp", model=str(b))])
    assert check_self_judging(judge, [ModelSpec(name="other", engine="llamacpp", model=str(c))]) == {}
    with pytest.warns(SelfPreferenceWarning, match="allowed by audit.allow_self_judging.*self-judged"):
        check_self_judging(judge, [ModelSpec(name="me", engine="llamacpp", model=str(b))], allow=True)


def test_the_llm_judge_flywheel_example_judges_with_a_model_that_is_no_contestant():
    # examples/flywheel-llm-judge.yaml: an offline LLM judge picks the round's data; its weights never answer
    from pathlib import Path

    from arena_learning.config import load_config_file
    from arena_learning.flywheel.settings import FlywheelConfig

    config = Path(__file__).resolve().parents[1] / "examples" / "flywheel-llm-judge.yaml"
    judge = load_config_file(config, FlywheelConfig)
    assert judge.judge.kind == "llm" and judge.judge.template == "own-reference"
    assert judge.judge.model.model not in {r.model for r in [judge.target, *judge.references]}
    truth = load_config_file(config, FlywheelConfig, ["judge={kind: verifier}"])  # the verifier in its place
    assert truth.judge.kind == "verifier" and truth.model_dump(exclude={"judge"}) == judge.model_dump(exclude={"judge"})
    assert judge.rating_judge == truth.judge  # the ratings stay the verifier's whoever picks the data
