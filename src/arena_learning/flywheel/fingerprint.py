"""Fingerprints: what a stage's model is made of, so that a rerun redoes a stage exactly when its inputs changed.

A stage's fingerprint covers its spec, slice, settings, the models, the judge, the test set and the
fingerprint of the stage before it. Workspaces keep them in ``flywheel/state.json``: a change here
redoes every stage of every workspace, so each field that was added later is written only where it is
not its default (``serve``, ``checks``), and the blob's keys stay what they were.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..tasks.checks import CHECKS_VERSION
from .schedule import StageStep
from .settings import FlywheelConfig


def stage_fingerprint(cfg: FlywheelConfig, step: StageStep, before: str) -> str:
    """Return the fingerprint of ``step``, ``before`` being the fingerprint of the stage it follows ('base': none)."""
    stage = step.spec
    kind_settings = cfg.training.settings(step.training.name, step.changes).model_dump(mode="json")
    extra = cfg.training.rm.model_dump(mode="json") if step.kind.rewarded else None
    # the sweep's other variants are not this stage's inputs: adding one redoes nothing
    blob = json.dumps({"stage": stage.model_dump(mode="json", exclude={"sweep"}), "variant": step.variant,
                       "slice": cfg.pool[stage.slice].model_dump(mode="json"), "settings": kind_settings,
                       "rm": extra,
                       "harvest": cfg.harvest.model_dump(mode="json", exclude=cfg.harvest.fingerprint_exclude()),
                       "target": cfg.target.model_dump(mode="json"),
                       "references": [m.model_dump(mode="json") for m in cfg.references],
                       "judge": cfg.judge.model_dump(mode="json"),
                       "test": cfg.tasks.model_dump(mode="json"),
                       "before": before, "where": [step.round, step.index], **_serve(cfg), **_checks(cfg, step)},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _checks(cfg: FlywheelConfig, step: StageStep) -> dict[str, Any]:
    # The task suite's checkers score a verifier's harvest and a verifier reward: a stage made under
    # other checkers (a workspace of stop 30 or before) is redone. Absent for other judges and rewards.
    j = cfg.judge
    if not ("verifier" in {j.kind, *(m.kind for m in j.members)} or step.kind.verified(cfg.training)):
        return {}
    return {"checks": CHECKS_VERSION}


def _serve(cfg: FlywheelConfig) -> dict[str, Any]:
    # How the target's models answer makes the harvest; absent while default, so fingerprints stay as they were
    t = cfg.training
    if t.serve_as == "transformers":
        return {}
    return {"serve": {"as": t.serve_as, "quantize": t.serve_quantize}}
