"""Exports load with `datasets` (JSONL, Parquet, dataset folders) and TRL's trainers take them as they are."""

from __future__ import annotations

import json

import pytest

from arena_learning.flywheel.export import export_items, format_of, pair_rows, read_items, sft_rows
from arena_learning.flywheel.harvest import PreferenceItem, SFTItem

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


def sft_items():
    return [
        SFTItem(messages=[user("What is 2 + 2?"), bot("4")], prompt_id="p1", slice="D1", round=1,
                source_model="ref-8shot", score=10.0, target_score=0.0),
        SFTItem(messages=[user("Name a colour."), bot("Red."), user("Another?"), bot("Blue.")], prompt_id="p2",
                slice="D1", round=1, source_model="ref-2shot", score=None, target_score=None),
    ]


def pair_items():
    return [
        PreferenceItem(prompt=[user("What is 3 + 4?")], chosen=[bot("7")], rejected=[bot("8")], margin=10.0,
                       chosen_model="ref", rejected_model="target", prompt_id="q1", slice="D2", round=2,
                       chosen_score=10.0, rejected_score=0.0, chosen_wins=2, rejected_wins=0),
        PreferenceItem(prompt=[user("Say hi.")], chosen=[bot("Hi!"), user("Again."), bot("Hi again!")],
                       rejected=[bot("no"), user("Again."), bot("no")], margin=4.5, chosen_model="target",
                       rejected_model="ref", prompt_id="q2", slice="D2", round=2),
    ]


@pytest.mark.parametrize("kind", ["sft", "pairs"])
def test_empty_exports_keep_their_columns(tmp_path, kind):
    import pyarrow.parquet as pq

    table = pq.read_table(export_items([], tmp_path / "empty.parquet", kind=kind))
    assert table.num_rows == 0 and ("messages" if kind == "sft" else "chosen") in table.column_names
    # (datasets 5.2's load_from_disk fails on any empty dataset folder, so only its features are checked)
    info = json.loads((export_items([], tmp_path / "empty_hf", kind=kind) / "dataset_info.json").read_text())
    assert ("messages" if kind == "sft" else "chosen") in info["features"]


def test_format_by_suffix():
    assert format_of("a/b.jsonl") == "jsonl" and format_of("b.parquet") == "parquet" and format_of("dir") == "hf"
    with pytest.raises(ValueError):
        format_of("x", "csv")


def test_rows_are_trl_formats_with_provenance():
    (row, _) = sft_rows(sft_items())
    assert row["messages"][1] == bot("4") and row["source_model"] == "ref-8shot" and row["prompt_id"] == "p1"
    (pair, _) = pair_rows(pair_items())
    assert list(pair)[:4] == ["prompt", "chosen", "rejected", "margin"]
    assert pair["margin"] == 10.0 and pair["chosen_model"] == "ref" and pair["round"] == 2


@pytest.mark.parametrize("kind", ["sft", "pairs"])
def test_exports_load_with_datasets(tmp_path, kind):
    from datasets import load_dataset, load_from_disk

    items = sft_items() if kind == "sft" else pair_items()
    rows = sft_rows(items) if kind == "sft" else pair_rows(items)
    j = export_items(items, tmp_path / "data.jsonl")
    p = export_items(items, tmp_path / "data.parquet")
    h = export_items(items, tmp_path / "data_hf")
    assert [x.model_dump() for x in read_items(j)] == [x.model_dump() for x in items]
    for ds in (load_dataset("json", data_files=str(j), split="train"),
               load_dataset("parquet", data_files=str(p), split="train"),
               load_from_disk(str(h))):
        assert ds.num_rows == 2
        got = ds.to_list()
        key = "messages" if kind == "sft" else "chosen"
        assert [r[key] for r in got] == [r[key] for r in rows]
        assert [r["prompt_id"] for r in got] == [r["prompt_id"] for r in rows]
    # A rewrite replaces the folder whole.
    export_items(items[:1], tmp_path / "data_hf")
    assert load_from_disk(str(h)).num_rows == 1
    assert json.loads(j.read_text().splitlines()[0])["slice"] in {"D1", "D2"}


def make_tiny(folder, seed: int = 0):
    """Save a tiny Llama and a byte-level BPE tokenizer with a chat template in ``folder`` (no download)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    texts = ["What is 2 + 2? 4", "Name a colour. Red. Blue.", "Say hi. Hi again!", "user assistant"] * 20
    bpe.train_from_iterator(texts, vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("tiny"))


def _args(cls, out, **kw):
    return cls(output_dir=str(out), max_steps=1, per_device_train_batch_size=2, report_to="none", bf16=False,
               activation_checkpointing=False, use_cpu=True, save_strategy="no", logging_steps=1, max_length=64, **kw)


@pytest.mark.parametrize("fmt", ["data.jsonl", "data.parquet", "data_hf"])
def test_trl_trainers_accept_the_exports(tmp_path, tiny, fmt):
    from datasets import load_dataset, load_from_disk
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer, SFTConfig, SFTTrainer

    def load(path):
        if path.suffix == ".jsonl":
            return load_dataset("json", data_files=str(path), split="train")
        if path.suffix == ".parquet":
            return load_dataset("parquet", data_files=str(path), split="train")
        return load_from_disk(str(path))

    sft = load(export_items(sft_items(), tmp_path / "sft" / fmt))
    pairs = load(export_items(pair_items(), tmp_path / "pairs" / fmt))
    tok = AutoTokenizer.from_pretrained(tiny)

    t = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny), args=_args(SFTConfig, tmp_path / "o1"),
                   train_dataset=sft, processing_class=tok)
    assert t.train().global_step == 1
    t = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny), args=_args(DPOConfig, tmp_path / "o2"),
                   train_dataset=pairs, processing_class=tok)
    assert t.train().global_step == 1
    rm = AutoModelForSequenceClassification.from_pretrained(tiny, num_labels=1)
    t = RewardTrainer(model=rm, args=_args(RewardConfig, tmp_path / "o3"), train_dataset=pairs, processing_class=tok)
    assert t.train().global_step == 1
