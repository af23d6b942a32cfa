"""The manifest behind a board: what a leaderboard's numbers depend on, so that two boards can be told apart.

The judge (its kind and name; an LLM judge's model identity, its prompt template's id and content hash,
its sampling), the test set (its size and a hash of every prompt's id and turns), the schedule, the rating
settings and seeds, the contestants, the canary results and the program version. ``arena leaderboard
--manifest`` prints it; the report shows it; ``arena compare`` of two workspaces whose manifests differ in
judge or test set says so before any figure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..config import JudgeConfig, RunConfig
from ..records import Prompt


def test_set_hash(prompts: Sequence[Prompt]) -> str:
    """Return a hash of a test set's content: every prompt's id and turns, in order."""
    blob = json.dumps([[p.id, p.turns] for p in prompts], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def judge_manifest(judge: JudgeConfig) -> dict[str, Any]:
    """Return what identifies ``judge``: kind and name, and an LLM judge's model, template and sampling."""
    out: dict[str, Any] = {"name": judge.name, "kind": judge.kind, "tie_threshold": judge.tie_threshold}
    if judge.kind == "panel":
        out["rule"] = judge.rule
        out["members"] = [judge_manifest(m) for m in judge.members]
        return out
    if judge.kind != "llm" or judge.model is None:
        return out
    from ..errors import ArenaError
    from .llm_judges import load_judge_spec
    from .self_judging import identity

    try:
        spec = load_judge_spec(judge.template)
    except (ArenaError, OSError, ValueError) as err:  # a judge folder no longer there: say so, keep the rest
        out.update(template=judge.template, template_hash=None, template_error=str(err))
        return out
    parts: list[Any] = [spec.system, spec.template, spec.schema_, spec.parser]
    if spec.reference == "judge" or spec.fence != "markers":  # newer fields, only where set: older hashes stay
        parts.append({"reference": spec.reference, "reference_system": spec.reference_system,
                      "reference_sampling": spec.reference_sampling, "fence": spec.fence})
    text = json.dumps(parts, sort_keys=True)
    ident = identity(judge.model)
    model: dict[str, Any] = {"engine": judge.model.engine, "model": judge.model.model}
    if ident is not None and ident.kind == "endpoint":
        model["endpoints"] = sorted(ident.urls)
    elif ident is not None:
        from ..engines.identity import content_identity

        try:  # identity() names found weights by their content already ("sha256:..."), else by a path
            model["content"] = (ident.model if ident.model.startswith("sha256:")
                                else content_identity(ident.model)[:23])
        except OSError:
            model["content"] = None  # weights that are not here: named by the config only
    out.update(model=model, template=spec.id, template_hash=hashlib.sha256(text.encode()).hexdigest()[:16],
               sampling={**spec.sampling, **judge.sampling}, both_orders=judge.both_orders, combine=judge.combine)
    return out


def board_manifest(cfg: RunConfig, prompts: Sequence[Prompt], canaries: Sequence[dict[str, Any]] = ()
                   ) -> dict[str, Any]:
    """Return the manifest of ``cfg``'s board on ``prompts`` (the test set), with its ``canaries`` reports."""
    from .. import __version__

    b = cfg.battles
    return {
        "judge": judge_manifest(cfg.judge),
        "test_set": {"prompts": len(prompts), "turns": sum(len(p.turns) for p in prompts),
                     "hash": test_set_hash(prompts)},
        "schedule": {"schedule": b.schedule, "baseline": b.baseline, "target": b.target},
        "ratings": cfg.ratings.model_dump(mode="json"),
        "models": [m.name for m in cfg.models],
        "canaries": [{"set": c.get("set_name"), "failed": c.get("failed", [])} for c in canaries],
        "program": f"arena-learning {__version__}",
    }


def imported_manifest(judge: str, prompts: Sequence[Prompt], canaries: Sequence[dict[str, Any]] = ()
                      ) -> dict[str, Any]:
    """Return the manifest of a board of imported judgments: the judge by name only (its settings are not here)."""
    from .. import __version__

    return {"judge": {"name": judge, "kind": "imported"},
            "test_set": {"prompts": len(prompts), "turns": sum(len(p.turns) for p in prompts),
                         "hash": test_set_hash(prompts)},
            "canaries": [{"set": c.get("set_name"), "failed": c.get("failed", [])} for c in canaries],
            "program": f"arena-learning {__version__}"}


def manifest_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Return what makes two manifests' boards not comparable as like for like: the judge, the test set."""
    out = []
    if a.get("judge") != b.get("judge"):
        ja, jb = a.get("judge") or {}, b.get("judge") or {}
        what = [k for k in sorted(set(ja) | set(jb)) if ja.get(k) != jb.get(k)]
        out.append(f"the judges differ ({', '.join(what)})")
    ta, tb = a.get("test_set") or {}, b.get("test_set") or {}
    if ta.get("hash") != tb.get("hash"):
        out.append(f"the test sets differ ({ta.get('prompts')} prompts, hash {ta.get('hash')}; "
                   f"{tb.get('prompts')} prompts, hash {tb.get('hash')})")
    return out


def manifest_line(m: dict[str, Any] | None) -> str:
    """Return the manifest in one line, for a terminal table's foot: judge, test set, schedule, seeds, canaries.

    ``arena leaderboard --manifest`` prints it whole (JSON); this line names what tells two boards apart.
    """
    if not m:
        return "manifest: none (no run in this workspace)"
    j = m.get("judge") or {}
    judge = f"judge {j.get('name')} ({j.get('kind')}"
    model = j.get("model") or {}
    if model:
        where = model.get("content") or ", ".join(model.get("endpoints") or []) or ""
        judge += f", {model.get('engine')} {model.get('model')}" + (f" {where}" if where else "")
    if j.get("template"):
        judge += f", template {j['template']} #{j.get('template_hash')}"
    if j.get("members"):
        judge += f", {j.get('rule')} of {', '.join(str(x.get('name')) for x in j['members'])}"
    parts = [judge + ")"]
    t = m.get("test_set") or {}
    parts.append(f"test set {t.get('prompts')} prompts, {t.get('turns')} turns, #{t.get('hash')}")
    s = m.get("schedule") or {}
    if s:
        parts.append(f"schedule {s.get('schedule')}" + "".join(f" {k} {s[k]}" for k in ("baseline", "target")
                                                              if s.get(k)))
    r = m.get("ratings") or {}
    if r:
        parts.append(f"bootstrap {r.get('bootstrap')} over {r.get('resample')}s, seed {r.get('seed')}")
    canaries = m.get("canaries") or []
    failed = sorted({f for c in canaries for f in c.get("failed") or []})
    if canaries:
        parts.append("canaries " + ("FAILED: " + ", ".join(failed) if failed else "passed"))
    else:
        parts.append("canaries off (a verifier checks reference answers)" if j.get("kind") == "verifier"
                     else "no canaries run")
    parts.append(str(m.get("program")))
    return "manifest: " + "; ".join(parts)
