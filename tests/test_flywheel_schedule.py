"""The flywheel's schedule: one walk of the run for the runner and the planner, kinds looked up, old workspaces kept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from arena_learning.config import validate_config
from arena_learning.errors import ConfigError
from arena_learning.flywheel.fingerprint import stage_fingerprint
from arena_learning.flywheel.kinds import DATA_KINDS, STAGE_KINDS, TRAIN_KINDS, stage_kind
from arena_learning.flywheel.schedule import Evaluate, RoundEnd, StageStep, schedule
from arena_learning.flywheel.settings import FlywheelConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "arena_learning"
BEFORE = Path(__file__).parent / "fixtures" / "flywheel_schedule_before.json"
"""Written by the round runner before the schedule existed (``Flywheel.run`` with its stages and evaluations
recorded instead of run): per config, each stage's key, model, folder, start, selection, data file and fingerprint
as a workspace's ``flywheel/state.json`` keeps them, and each evaluation's label and models."""

KINDS = "|".join(sorted({*STAGE_KINDS, *TRAIN_KINDS, *DATA_KINDS, "rloo", "grpo"}))
LITERAL = rf"""["'](?:{KINDS})["']"""
COMPARED = re.compile(rf"(?:==|!=)\s*{LITERAL}|{LITERAL}\s*(?:==|!=)|\bin\s*[(\[{{][^)\]}}]*{LITERAL}")
LOOP = re.compile(r"\bfor\s+[\w, ()]+?\s+in\b")  # a loop's "in" is no comparison


def compares_a_kind(line: str) -> bool:
    return COMPARED.search(LOOP.sub("for", line)) is not None


def walk(cfg: FlywheelConfig, root: Path) -> tuple[list[dict], list[dict]]:
    """Return the stages and evaluations of ``cfg``'s schedule, every stage making its model, as the fixture has
    them."""
    stages, evals = [], []
    for step in schedule(cfg, root, list(cfg.harvest.baselines)):
        if isinstance(step, StageStep):
            step.made = True
            main = step.main
            step.fingerprint = stage_fingerprint(cfg, step, step.follows.fingerprint if step.follows else "base")
            stages.append({"key": step.key, "model": step.model.name, "folder": str(step.folder.relative_to(root)),
                           "fingerprint": step.fingerprint, "start": step.start.name, "selection": step.selection,
                           "size": 0 if step.baseline and step.variant != "all" and main is not None else None,
                           "data": step.kind.data.file})
        elif isinstance(step, Evaluate):
            evals.append({"label": step.label, "models": [m.name for m in step.models]})
    return stages, evals


@pytest.mark.parametrize("name", ["sft-dpo-rl", "served-verifier"])
def test_a_workspace_of_the_runner_before_the_schedule_resumes_with_every_stage_done(name):
    # Its keys, folders, model names and fingerprints are what the schedule makes: every stage it finished is found
    # done, and its evaluations rate the same models under the same labels (a changed fingerprint would redo all).
    before = json.loads(BEFORE.read_text())[name]
    cfg = validate_config(before["config"], FlywheelConfig, name)
    stages, evals = walk(cfg, Path("/ws/flywheel"))
    assert stages == before["stages"]
    assert evals == before["evaluations"]


def test_a_skipped_stage_leaves_the_model_before_it_and_runs_no_sweep():
    cfg = validate_config({**json.loads(BEFORE.read_text())["sft-dpo-rl"]["config"]}, FlywheelConfig, "t")
    seen = []
    for step in schedule(cfg, Path("fw"), ["random"]):
        if isinstance(step, StageStep):
            step.made = step.key != "r1.0-dpo"  # the dpo stage had no data
            seen.append((step.key, step.start.name))
        elif isinstance(step, RoundEnd):
            seen.append((f"round {step.round}", step.model.name))
        else:
            seen.append((step.label, len(step.models)))
    assert seen == [("r0.0-sft", "student-base"), ("r0.0-sft-random", "student-base"),
                    ("round 0 stage 0 (sft)", 4), ("round 0", "student-r0-sft"),
                    ("r1.0-dpo", "student-r0-sft"), ("r1.0-dpo-random", "student-r0-sft"),  # no sweep b0.1
                    ("round 1 stage 0 (dpo)", 5), ("r1.1-rl", "student-r0-sft"),
                    ("round 1 stage 1 (rl)", 6), ("round 1", "student-r1-rl")]


def test_kinds_are_registered_once_and_an_unknown_one_is_named():
    assert [k.data.file for k in STAGE_KINDS.values()] == ["sft.jsonl", "dpo.jsonl", "rm.jsonl"]
    assert [k.name for k in TRAIN_KINDS.values() if k.on_prompts] == ["rl"]
    with pytest.raises(ConfigError, match="'ppo': use sft, dpo or rl"):
        stage_kind("ppo")


def test_no_stage_or_training_kind_is_compared_with_a_literal():
    # The pattern catches what the runner and the planner used to write.
    for line in ['if stage.kind in ("sft", "dpo"):', 'need = st.kind != "rl" or x', "if kind == 'rm':",
                 'done = settings.algorithm if kind == "rl" else kind', 'x = s.algorithm == "rloo"']:
        assert compares_a_kind(line), line
    assert not compares_a_kind('for col in ("round", "sft", "dpo"):')
    files = [*(SRC / "flywheel").glob("*.py"), SRC / "cli" / "flywheel.py"]
    found = [f"{p.relative_to(SRC)}:{n}: {line.strip()}" for p in files if p.name != "kinds.py"  # the registry
             for n, line in enumerate(p.read_text().splitlines(), 1) if compares_a_kind(line)]
    assert not found, "look the kind up in flywheel/kinds.py instead:\n" + "\n".join(found)
