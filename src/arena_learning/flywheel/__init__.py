"""The data flywheel: battles become training data, TRL trains the target, the new model re-enters the arena.

- ``harvest``: SFT examples, DPO and reward-model pairs, and selection baselines, from battle records;
- ``export``: those sets in TRL's formats (JSONL, Parquet, Hugging Face dataset folders);
- ``train``: SFT, DPO, reward model and RL (RLOO/GRPO) with TRL and PEFT, LoRA merged for serving;
- ``settings``: the training stages' settings (the paper's hyperparameters by default).

Harvest and export are pure functions on records; only training touches disk (model folders).
"""
