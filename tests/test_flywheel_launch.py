"""Training at scale: the launch commands (Accelerate with DeepSpeed ZeRO-2/3 or DDP, torchrun) that
`arena flywheel --print-launch` prints, and the same training run through the launcher path as one CPU
process (accelerate launch --cpu, torchrun), which trains the weights in-process training gives."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from arena_learning.config import validate_config
from arena_learning.errors import ConfigError
from arena_learning.flywheel import train
from arena_learning.flywheel.harvest import PreferenceItem, SFTItem
from arena_learning.flywheel.rounds import Flywheel, launch_plan
from arena_learning.flywheel.settings import FlywheelConfig, SFTSettings
from arena_learning.flywheel.train_stage import read_job
from arena_learning.scale.launch import (
    LaunchError,
    LaunchSettings,
    accelerate_config_path,
    check_launchable,
    launch_command,
    uses_deepspeed,
)
from arena_learning.store import Store
from arena_learning.tasks import generate_tasks

from .conftest import REPO, arena

PROMPTS = generate_tasks(4, seed=11)
TINY = {"learning_rate": 1e-4, "epochs": 1, "max_steps": 1, "batch_size": 2, "micro_batch_size": 2, "max_length": 64,
        "lora": {"r": 4, "alpha": 8}, "save_steps": 1, "warmup_ratio": 0.0}
CONFIG = {
    "name": "launch",
    "target": {"name": "student", "engine": "transformers", "model": "bundled", "mode": "completion",
               "params": {"max_tokens": 8, "temperature": 0.0, "stop": ["\n"]}},
    "references": [{"name": "ref", "engine": "llamacpp", "model": "bundled", "mode": "completion"}],
    "pool": {"D0": {"n": 6, "seed": 101}, "D1": {"n": 6, "seed": 102}},
    "rounds": [{"stages": [{"kind": "sft", "slice": "D0"}]},
               {"stages": [{"kind": "dpo", "slice": "D1"}, {"kind": "rl", "slice": "D1"}]}],
    "harvest": {"baselines": ["random"]},
    "training": {"sft": TINY, "dpo": TINY, "rm": TINY, "rl": {**TINY, "reward": "model"},
                 "launch": {"launcher": "accelerate", "accelerate_config": "zero3", "num_processes": 8,
                            "mixed_precision": "bf16"}},
}


def config(launch: dict | None = None) -> FlywheelConfig:
    data = json.loads(json.dumps(CONFIG))
    if launch is not None:
        data["training"]["launch"] = launch
    return validate_config(data, FlywheelConfig, "test")


def sft_items() -> list[SFTItem]:
    return [SFTItem(messages=[{"role": "user", "content": p.turns[0]},
                              {"role": "assistant", "content": p.reference[0]}],
                    prompt_id=p.id, source_model="ref") for p in PROMPTS]


def pairs() -> list[PreferenceItem]:
    return [PreferenceItem(prompt=[{"role": "user", "content": p.turns[0]}],
                           chosen=[{"role": "assistant", "content": p.reference[0]}],
                           rejected=[{"role": "assistant", "content": "I do not know"}], margin=10.0, prompt_id=p.id,
                           chosen_model="ref", rejected_model="student") for p in PROMPTS]


# ---- the commands (fast) -------------------------------------------------------------------------


def test_shipped_accelerate_configs_are_zero2_zero3_and_ddp():
    got = {name: yaml.safe_load(accelerate_config_path(name).read_text()) for name in ("zero2", "zero3", "multi_gpu")}
    assert got["zero2"]["distributed_type"] == "DEEPSPEED" and got["zero2"]["deepspeed_config"]["zero_stage"] == 2
    assert got["zero3"]["deepspeed_config"]["zero_stage"] == 3
    assert got["zero3"]["deepspeed_config"]["zero3_save_16bit_model"] is True  # the save gathers the shards
    assert got["multi_gpu"]["distributed_type"] == "MULTI_GPU"
    assert uses_deepspeed(LaunchSettings(launcher="accelerate", accelerate_config="zero2"))
    assert not uses_deepspeed(LaunchSettings(launcher="accelerate", accelerate_config="multi_gpu"))
    with pytest.raises(ConfigError, match="neither a shipped config"):
        accelerate_config_path("zero4")


def test_accelerate_and_torchrun_commands():
    job = Path("/w/flywheel/round-0/0-sft/job.json")
    cmd = launch_command(LaunchSettings(launcher="accelerate", accelerate_config="zero2", num_processes=4,
                                        mixed_precision="bf16", main_process_port=29600), job)
    assert Path(cmd[0]).name == "accelerate" and cmd[1] == "launch"
    assert cmd[2:4] == ["--config_file", str(accelerate_config_path("zero2"))]
    assert cmd[4:] == ["--num_processes", "4", "--mixed_precision", "bf16", "--main_process_port", "29600",
                       "-m", "arena_learning.flywheel.train_stage", "--spec", str(job)]
    cmd = launch_command(LaunchSettings(launcher="torchrun", num_processes=2, extra_args=["--nnodes", "1"]), job)
    assert Path(cmd[0]).name == "torchrun"
    assert cmd[1:] == ["--nproc_per_node", "2", "--nnodes", "1", "-m", "arena_learning.flywheel.train_stage",
                       "--spec", str(job)]
    assert launch_command(LaunchSettings(), job) == [sys.executable, "-m", "arena_learning.flywheel.train_stage",
                                                     "--spec", str(job)]


def test_deepspeed_configs_need_gpus_and_deepspeed():
    with pytest.raises(ConfigError, match="DeepSpeed, which needs GPUs"):
        config({"launcher": "accelerate", "accelerate_config": "zero3", "cpu": True})
    zero2 = LaunchSettings(launcher="accelerate", accelerate_config="zero2")
    if importlib.util.find_spec("deepspeed") is None:
        with pytest.raises(LaunchError, match="pip install deepspeed"):
            check_launchable(zero2)
    check_launchable(LaunchSettings(launcher="accelerate", accelerate_config="multi_gpu"))


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="deepspeed is installed here")
def test_a_flywheel_that_cannot_launch_says_so_before_its_first_battle(tmp_path):
    from arena_learning.flywheel.rounds import run_flywheel

    with Store(tmp_path / "ws") as store:
        with pytest.raises(LaunchError, match="pip install deepspeed"):
            run_flywheel(config({"launcher": "accelerate", "accelerate_config": "zero2"}), store, show_progress=False)
        assert store.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 0


def test_print_launch_lists_every_stage_without_making_the_workspace(tmp_path):
    cfg_file = tmp_path / "fw.yaml"
    cfg_file.write_text(yaml.safe_dump(CONFIG))
    ws = tmp_path / "ws"
    out = arena("flywheel", cfg_file, "-w", ws, "--print-launch", cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stdout.splitlines() if not x.startswith("#")]
    # r0 sft and its random ablation; r1 dpo and its ablation; r1 rl = reward model, then RLOO
    assert len(lines) == 6
    zero3 = str(accelerate_config_path("zero3"))
    for line in lines:
        assert " launch --config_file " + zero3 + " --num_processes 8 --mixed_precision bf16 -m " \
               "arena_learning.flywheel.train_stage --spec " in line
    specs = [line.rsplit(" ", 1)[1] for line in lines]
    root = ws / "flywheel"
    assert specs == [str(root / "round-0/0-sft/job.json"), str(root / "round-0/0-sft-random/job.json"),
                     str(root / "round-1/0-dpo/job.json"), str(root / "round-1/0-dpo-random/job.json"),
                     str(root / "round-1/1-rl/rm/job.json"), str(root / "round-1/1-rl/job.json")]
    assert not ws.exists()
    js = arena("flywheel", cfg_file, "-w", ws, "--print-launch", "--json", "--set", "training.launch.launcher=torchrun",
               cwd=REPO)
    rows = json.loads(js.stdout)
    assert [r["kind"] for r in rows] == ["sft", "sft", "dpo", "dpo", "rm", "rl"]
    assert rows == launch_plan(config({**CONFIG["training"]["launch"], "launcher": "torchrun"}), ws)
    assert all(Path(r["command"][0]).name == "torchrun" and r["command"][1:3] == ["--nproc_per_node", "8"]
               for r in rows)


# ---- the same training through the launcher, one CPU process (slow) ---------------------------


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
def test_sft_launched_with_accelerate_on_one_cpu_trains_what_in_process_training_does(tmp_path):
    cfg = config({"launcher": "accelerate", "accelerate_config": "multi_gpu", "num_processes": 1, "cpu": True})
    with Store(tmp_path / "ws") as store:
        fw = Flywheel(cfg, store, show_progress=False, say=lambda _: None)
        launched = fw.train_one("sft", "bundled", tmp_path / "launched", items=sft_items())
    log = (tmp_path / "launched" / "launch.log").read_text()
    assert " launch --config_file " in log.splitlines()[0] and "--num_processes 1" in log and "--cpu" in log
    job = read_job(tmp_path / "launched" / "job.json")
    assert job.kind == "sft" and job.cpu and Path(job.data).is_file() and Path(job.base).is_dir()
    assert launched.steps == 1 and launched.examples == 4 and launched.train_loss is not None
    assert train.stage_done(tmp_path / "launched") and not (tmp_path / "launched" / "work").exists()
    inproc = train.train_sft("bundled", sft_items(), tmp_path / "inprocess", SFTSettings(**TINY), spec=cfg.target)
    assert launched.train_loss == pytest.approx(inproc.train_loss, rel=1e-4)
    a, b = _weights(launched.model_dir), _weights(inproc.model_dir)
    assert a.keys() == b.keys()
    changed = 0
    base = _weights(train.resolve_hf_folder("bundled"))
    import torch

    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
        changed += int(k in base and not torch.equal(a[k], base[k]))
    assert changed > 0  # LoRA was merged into the weights
    # A finished stage is not launched again.
    with Store(tmp_path / "ws") as store:
        again = Flywheel(cfg, store, show_progress=False).train_one("sft", "bundled", tmp_path / "launched",
                                                                    items=sft_items())
    assert again.reused


@pytest.mark.slow
def test_two_processes_train_one_model_with_the_configured_batch(tmp_path):
    """torchrun with 2 CPU processes (DDP over gloo): the ranks share each optimizer step's batch_size examples,
    the model gathered from the ranks is written once, by the main process."""
    data = json.loads(json.dumps(CONFIG))
    data["training"]["sft"] = {**TINY, "micro_batch_size": 1, "threads": 1}
    data["training"]["launch"] = {"launcher": "torchrun", "num_processes": 2}
    cfg = validate_config(data, FlywheelConfig, "test")
    with Store(tmp_path / "ws") as store:
        res = Flywheel(cfg, store, show_progress=False, say=lambda _: None).train_one(
            "sft", "bundled", tmp_path / "ddp", items=sft_items())
    log = (tmp_path / "ddp" / "launch.log").read_text()
    assert "--nproc_per_node 2" in log.splitlines()[0]
    assert log.count('{"kind": "sft"') == 2  # each rank ends with its summary
    assert res.steps == 1 and train.stage_done(tmp_path / "ddp")
    losses = json.loads((tmp_path / "ddp" / "losses.json").read_text())
    # 2 examples per step (1 per process, no accumulation) of 4: half an epoch, as in one process
    assert losses["done"] and [e["epoch"] for e in losses["log"] if "loss" in e] == [0.5]
    assert not list((tmp_path / "ddp").glob(".model*"))  # no partial or gathered leftovers
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(res.model_dir).num_parameters() > 1e8


@pytest.mark.slow
def test_reward_model_launched_with_torchrun_saves_a_one_score_classifier(tmp_path):
    cfg = config({"launcher": "torchrun", "num_processes": 1})
    with Store(tmp_path / "ws") as store:
        rm = Flywheel(cfg, store, show_progress=False, say=lambda _: None).train_one(
            "rm", "bundled", tmp_path / "rm", items=pairs())
    assert rm.steps == 1 and "--nproc_per_node 1" in (tmp_path / "rm" / "launch.log").read_text().splitlines()[0]
    conf = json.loads((rm.model_dir / "config.json").read_text())
    assert conf["architectures"][0].endswith("ForSequenceClassification") and conf.get("num_labels", 1) == 1
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(rm.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(rm.model_dir)
    assert model(**tok(["Question: 1+1\nAnswer: 2"], return_tensors="pt")).logits.shape == (1, 1)


@pytest.mark.slow
def test_a_failed_launch_names_its_log_and_leaves_no_model(tmp_path):
    cfg = config({"launcher": "torchrun", "num_processes": 1})
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # a model folder that cannot load
    with Store(tmp_path / "ws") as store:
        fw = Flywheel(cfg, store, show_progress=False, say=lambda _: None)
        with pytest.raises(LaunchError, match=r"exit \d+\); its log is .*launch.log"):
            fw.train_one("sft", str(broken), tmp_path / "bad", items=sft_items())
    assert not train.stage_done(tmp_path / "bad")


@pytest.mark.slow
def test_a_flywheel_round_trains_through_the_launcher_and_rates_the_model(trained_flywheel):
    # the session's trained flywheel: test_plan's FLYWHEEL trained through `accelerate launch` on the CPU
    assert trained_flywheel.config["training"]["launch"] == {"launcher": "accelerate", "accelerate_config": "multi_gpu",
                                                             "num_processes": 1, "cpu": True}
    stage = trained_flywheel.workspace / "flywheel" / "round-0" / "0-sft"
    job = read_job(stage / "job.json")
    assert job.data == str(stage / "train.jsonl") and len(Path(job.data).read_text().splitlines()) == 6
    assert "accelerate" in (stage / "launch.log").read_text().splitlines()[0]
    (rnd,) = trained_flywheel.report["rounds"]
    assert rnd["model"] == "student-r0-sft" and rnd["sft_examples"] == 6 and rnd["train_loss"] is not None
    assert rnd["rating"] is not None  # the launched model answered the test set and was rated
