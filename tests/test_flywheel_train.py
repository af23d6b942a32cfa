"""Real TRL steps on the bundled model on the CPU (LoRA, one step, tiny data): SFT, DPO, reward model and RL
each save a model that then answers through the arena."""

from __future__ import annotations

import asyncio
import json

import pytest

from arena_learning.arena.answers import answer_prompts
from arena_learning.config import ModelSpec
from arena_learning.engines import build_engine
from arena_learning.engines.calls import CallStats
from arena_learning.flywheel import train
from arena_learning.flywheel.harvest import PreferenceItem, SFTItem
from arena_learning.flywheel.settings import DPOSettings, LoraSettings, RLSettings, RMSettings, SFTSettings
from arena_learning.store import Store
from arena_learning.tasks import generate_tasks

TARGET = ModelSpec(name="student", engine="transformers", model="bundled", mode="completion",
                   params={"max_tokens": 8, "stop": ["\n"]})
PROMPTS = generate_tasks(4, seed=11)
TINY = {"learning_rate": 1e-4, "epochs": 1, "max_steps": 1, "batch_size": 2, "micro_batch_size": 2,
        "max_length": 64, "lora": LoraSettings(r=4, alpha=8), "save_steps": 1, "warmup_ratio": 0.0}


def sft_items():
    return [SFTItem(messages=[{"role": "user", "content": p.turns[0]},
                              {"role": "assistant", "content": p.reference[0]}],
                    prompt_id=p.id, source_model="ref") for p in PROMPTS]


def pairs():
    return [PreferenceItem(prompt=[{"role": "user", "content": p.turns[0]}],
                           chosen=[{"role": "assistant", "content": p.reference[0]}],
                           rejected=[{"role": "assistant", "content": "I do not know"}], margin=10.0, prompt_id=p.id,
                           chosen_model="ref", rejected_model="student") for p in PROMPTS]


def answers_through_the_arena(folder, workspace) -> CallStats:
    spec = TARGET.model_copy(update={"model": str(folder)})
    with Store(workspace) as store:
        result = asyncio.run(answer_prompts(store, "student", build_engine(spec), PROMPTS[:3]))
    assert result.stats.ok + result.stats.failed + result.stats.cached == 3
    return result.stats


# ---- pure parts (fast) ---------------------------------------------------------------------


def test_rows_are_rendered_as_the_target_is_asked():
    (row,) = train.sft_training_rows(sft_items()[:1], TARGET)
    assert row == {"prompt": f"Question: {PROMPTS[0].turns[0]}\nAnswer:",
                   "completion": f" {PROMPTS[0].reference[0]}\n\n"}
    multi = SFTItem(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "1"},
                              {"role": "user", "content": "b"}, {"role": "assistant", "content": "2"}], prompt_id="m")
    rows = train.sft_training_rows([multi], TARGET)
    assert [r["completion"] for r in rows] == [" 1\n\n", " 2\n\n"]
    assert rows[1]["prompt"] == "Question: a\nAnswer: 1\n\nQuestion: b\nAnswer:"
    chat = train.sft_training_rows([multi], None)
    assert chat[1]["completion"] == [{"role": "assistant", "content": "2"}] and len(chat[1]["prompt"]) == 3
    (pair,) = train.pair_training_rows(pairs()[:1], TARGET, with_margin=True)
    assert pair["chosen"] == f" {PROMPTS[0].reference[0]}\n\n" and pair["margin"] == 10.0


def test_verifier_reward_scores_completions_as_the_arena_would():
    reward = train.verifier_reward(PROMPTS, TARGET)
    ids = [p.id for p in PROMPTS[:2]]
    got = reward(prompts=["", ""], completions=[f" {PROMPTS[0].reference[0]}\nQuestion: x", " wrong"], prompt_id=ids)
    assert got[0] == 1.0 and got[1] < 1.0
    # chance-corrected: what the answer would earn without reading its question is taken off
    world = generate_tasks(48, seed=3, suite=2)
    yes_no = [p for p in world if p.category == "yes_no"]
    corrected = train.verifier_reward(world, TARGET, chance_corrected=True)
    got = corrected(prompts=[""] * len(yes_no), completions=[" yes"] * len(yes_no), prompt_id=[p.id for p in yes_no])
    assert sorted(set(got)) == [-0.5, 0.5] and sum(got) == 0
    assert corrected.__name__ == "verifier_above_chance"
    with pytest.raises(ValueError, match="chance_corrected needs reward: verifier"):
        RLSettings(chance_corrected=True)


def test_last_checkpoint_skips_partial_saves(tmp_path):
    for step, complete in [(2, True), (4, True), (6, False)]:
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    assert train.last_checkpoint(tmp_path).name == "checkpoint-4"
    assert not (tmp_path / "checkpoint-6").exists()


# ---- real steps on the bundled model (slow) ------------------------------------------------


@pytest.fixture(scope="module")
def stages(module_tmp):
    return module_tmp


@pytest.mark.slow
def test_sft_trains_saves_and_answers(stages, tmp_path):
    res = train.train_sft("bundled", sft_items(), stages / "sft", SFTSettings(**TINY), spec=TARGET)
    assert res.steps == 1 and res.model_dir == stages / "sft" / "model" and train.stage_done(stages / "sft")
    log = json.loads((stages / "sft" / "losses.json").read_text())
    assert log["done"] and any("loss" in e for e in log["log"])
    assert not (stages / "sft" / "work").exists()
    assert "quantization_config" not in json.loads((res.model_dir / "config.json").read_text())
    stats = answers_through_the_arena(res.model_dir, tmp_path / "ws")
    assert stats.sent == 3
    # Done stages are not trained again. (A model retrained into the same folder is a new model to the
    # ledger: test_flywheel_engine.py.)
    assert train.train_sft("bundled", sft_items(), stages / "sft", SFTSettings(**TINY), spec=TARGET).reused


@pytest.mark.slow
def test_dpo_trains_saves_and_answers(stages, tmp_path):
    res = train.train_dpo("bundled", pairs(), stages / "dpo", DPOSettings(**TINY, beta=0.1), spec=TARGET)
    assert res.steps == 1 and res.train_loss is not None
    assert answers_through_the_arena(res.model_dir, tmp_path / "ws").sent == 3


@pytest.mark.slow
def test_reward_model_then_rloo_with_it(stages, tmp_path):
    rm = train.train_reward("bundled", pairs(), stages / "rm", RMSettings(**TINY), spec=TARGET)
    assert rm.steps == 1
    cfg = json.loads((rm.model_dir / "config.json").read_text())
    assert cfg["architectures"][0].endswith("ForSequenceClassification") and cfg.get("num_labels", 1) == 1
    rl = train.train_rl("bundled", PROMPTS, stages / "rl",
                        RLSettings(**TINY, reward="model", num_generations=2, max_completion_length=4),
                        spec=TARGET, reward_model=rm.model_dir)
    assert rl.steps == 1 and rl.kind == "rloo"
    assert answers_through_the_arena(rl.model_dir, tmp_path / "ws").sent == 3
    # The trained reward model scores through plain transformers.
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rm.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(rm.model_dir)
    assert model(**tok(["Question: 1+1\nAnswer: 2"], return_tensors="pt")).logits.shape == (1, 1)


@pytest.mark.slow
def test_full_fine_tuning_sft_then_dpo_then_rl_each_from_the_last(tmp_path):
    """``lora: null`` (the GPU check's full fine-tuning): every weight trains and each stage saves a whole model that
    the next starts from and the arena answers with."""
    full = {**TINY, "lora": None}
    sft = train.train_sft("bundled", sft_items(), tmp_path / "sft", SFTSettings(**full), spec=TARGET)
    assert sft.steps == 1 and not (sft.model_dir / "adapter_config.json").exists()
    dpo = train.train_dpo(str(sft.model_dir), pairs(), tmp_path / "dpo", DPOSettings(**full, beta=0.1), spec=TARGET)
    assert dpo.steps == 1 and dpo.train_loss is not None
    rl = train.train_rl(str(dpo.model_dir), PROMPTS, tmp_path / "rl",
                        RLSettings(**full, reward="verifier", num_generations=2, max_completion_length=4), spec=TARGET)
    assert rl.steps == 1
    assert answers_through_the_arena(rl.model_dir, tmp_path / "ws").sent == 3


@pytest.mark.slow
def test_grpo_with_the_chance_corrected_verifier_reward(stages, tmp_path):
    """GRPO on world prompts, rewarded by the checker minus what each completion earns without its question."""
    world = [p for p in generate_tasks(24, seed=5, suite=2) if p.category in ("yes_no", "comparison")]
    settings = RLSettings(**TINY, reward="verifier", chance_corrected=True, algorithm="grpo", num_generations=2,
                          max_completion_length=4)
    rl = train.train_rl("bundled", world, stages / "grpo", settings, spec=TARGET)
    assert rl.steps == 1 and rl.kind == "grpo"
    logged = json.loads((stages / "grpo" / train.LOSSES).read_text())
    assert "rewards/verifier_above_chance/mean" in logged["log"][0], logged
    assert answers_through_the_arena(rl.model_dir, tmp_path / "ws").sent == 3


@pytest.mark.slow
def test_a_map_with_a_tokenizer_is_named_by_the_tokenizers_name_and_still_tokenizes_with_it():
    """What the trainers' tokenizing maps get: the same rows, a name that does not pickle the vocabulary."""
    import datasets.arrow_dataset as arrow_dataset
    import datasets.fingerprint as fingerprint
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    def tokenizer(vocab: dict[str, int], name: str = "tiny") -> PreTrainedTokenizerFast:
        raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        raw.pre_tokenizer = pre_tokenizers.Whitespace()
        return PreTrainedTokenizerFast(tokenizer_object=raw, name_or_path=name)

    one, other = tokenizer({"[UNK]": 0, "a": 1, "b": 2}), tokenizer({"[UNK]": 0, "a": 2, "b": 1})
    ds = Dataset.from_list([{"text": "a b"}, {"text": "b"}])

    def tokenize(example, processing_class):
        return {"ids": processing_class(example["text"])["input_ids"]}

    def mapped(tok):
        out = ds.map(tokenize, fn_kwargs={"processing_class": tok})
        return out["ids"], out._fingerprint

    (ids1, fp1), (ids2, fp2) = mapped(one), mapped(other)
    assert ids1 == [[1, 2], [2]] and ids2 == [[2, 1], [1]] and fp1 != fp2  # datasets hashes the vocabulary
    full = fingerprint.update_fingerprint
    with train.tokenizers_fingerprinted_by_name():
        (in1, light1), (in2, light2) = mapped(one), mapped(other)
        renamed = mapped(tokenizer({"[UNK]": 0, "a": 1, "b": 2}, name="other"))[1]
    assert (in1, in2) == (ids1, ids2)  # each map still tokenizes with its own tokenizer
    assert light1 == light2 != renamed  # named by class, name, size and template: the vocabulary is not pickled
    assert fingerprint.update_fingerprint is full and arrow_dataset.update_fingerprint is full  # put back
    assert mapped(one)[1] == fp1


def test_answer_tokens_only_head_gives_the_full_heads_loss_and_gradients():
    """On the CPU the fused LM head scores only the answer tokens inside the hook, and that changes nothing."""
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arena_learning.engines.transformers_engine import bundled_hf_folder, clear_quantization

    cpu = torch.device("cpu")
    folder = bundled_hf_folder()
    tok = AutoTokenizer.from_pretrained(folder)
    model = clear_quantization(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32))
    trl_utils.add_fused_lm_head(model)
    rows = train.sft_training_rows(sft_items(), TARGET)
    ids, labels = [], []
    for r in rows:
        p, c = tok(r["prompt"])["input_ids"], tok(r["completion"], add_special_tokens=False)["input_ids"]
        ids.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, ids))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batch = {"input_ids": torch.tensor([x + [pad] * (width - len(x)) for x in ids]),
             "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
             "labels": torch.tensor([y + [-100] * (width - len(y)) for y in labels])}
    probe = model.model.norm.weight  # the last weight before the head: its gradient passes through the head

    def loss_and_grad():
        probe.grad = None
        out = model(**batch, fused_lm_head=True)
        out.loss.backward()
        return out.loss.detach(), out.log_probs.detach(), probe.grad.detach().clone()

    assert not trl_utils._use_triton(cpu)  # TRL scores every position on the CPU...
    full = loss_and_grad()
    with train.answer_tokens_only_on_cpu():
        assert trl_utils._use_triton(cpu)  # ...but only the labelled ones inside the hook
        compact = loss_and_grad()
    assert not trl_utils._use_triton(cpu)  # restored
    answer_tokens = int((batch["labels"][:, 1:] != -100).sum())
    assert answer_tokens < batch["input_ids"].numel() // 4  # mostly prompt: the head's work falls by > 4x
    assert torch.allclose(full[0], compact[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(full[1], compact[1], rtol=1e-5, atol=1e-5)
    assert torch.allclose(full[2], compact[2], rtol=1e-4, atol=1e-6) and full[2].abs().sum() > 0
