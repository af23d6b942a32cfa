"""Lineage: where a training example came from. Each harvested example or pair names its prompt (id and slice),
the round, the model whose answer it is and the selection rule; its lineage adds the judge and the battles on
that prompt that decided it (the pair, the verdict, the scores, the judge's explanation of each game).

``arena harvest --lineage`` writes it beside each exported row; ``arena info WS --example PROMPT_ID`` traces
every example the flywheel trained on for one prompt back to its battles.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ArenaError
from ..records import Battle, Judgment
from ..store import Store
from .export import read_items
from .harvest import PreferenceItem, SFTItem
from .kinds import DATA_KINDS

DATA_FILES = tuple(k.file for k in DATA_KINDS.values())
"""The harvested data a flywheel stage keeps in its folder (flywheel/round-R/I-KIND/)."""


def item_models(item: SFTItem | PreferenceItem) -> list[str]:
    """Return the models whose answers an item holds (an SFT example: its source; a pair: chosen and rejected)."""
    if isinstance(item, SFTItem):
        return [item.source_model]
    return [m for m in (item.chosen_model, item.rejected_model) if m]


def battle_rows(battles: Iterable[Battle], prompt_id: str, models: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Return the battles on ``prompt_id`` (those with one of ``models`` when given) as lineage rows."""
    out = []
    for b in battles:
        if b.prompt_id != prompt_id or (models is not None and not {b.model_a, b.model_b} & set(models)):
            continue
        out.append({"judge": b.judge, "model_a": b.model_a, "model_b": b.model_b, "outcome": b.outcome,
                    "score_a": b.score_a, "score_b": b.score_b, "games": b.games})
    return out


def with_lineage(rows: list[dict[str, Any]], items: Sequence[SFTItem | PreferenceItem], judge: str,
                 battles: Sequence[Battle]) -> list[dict[str, Any]]:
    """Return export ``rows`` (one per item, in order) with ``judge`` and the ``battles`` that decided each."""
    by_prompt: dict[str, list[Battle]] = {}
    for b in battles:
        by_prompt.setdefault(b.prompt_id, []).append(b)
    return [{**row, "judge": judge, "battles": battle_rows(by_prompt.get(it.prompt_id, []), it.prompt_id,
                                                            item_models(it))}
            for row, it in zip(rows, items)]


def stage_files(root: Path) -> list[Path]:
    """Return every stage's harvested data file under the flywheel folder ``root``, in round and stage order."""
    return sorted(p for name in DATA_FILES for p in root.glob(f"round-*/*/{name}"))


def trace(store: Store, prompt_id: str) -> dict[str, Any]:
    """Return every harvested example of ``prompt_id`` in the workspace's flywheel, each with its stage, and the
    battles and judge games on that prompt in its slice: the example traced back to the verdicts behind it."""
    root = store.root / "flywheel"
    examples: list[dict[str, Any]] = []
    for path in stage_files(root):
        for it in read_items(path):
            if it.prompt_id == prompt_id:
                examples.append({"stage": str(path.parent.relative_to(root)), "file": str(path),
                                 "kind": "sft" if isinstance(it, SFTItem) else "pair", "models": item_models(it),
                                 **it.model_dump(exclude={"messages", "prompt", "chosen", "rejected"})})
    if not examples:
        raise ArenaError(f"no harvested example in {store.root} has prompt id {prompt_id!r}: give the prompt id of a "
                         "training example (the prompt_id column of `arena harvest` or of a stage's "
                         "flywheel/round-R/I-KIND/*.jsonl)")
    sets = sorted({f"flywheel/{e['slice']}" if not str(e["slice"]).startswith("flywheel/") else e["slice"]
                   for e in examples})
    battles: list[dict[str, Any]] = []
    games: list[dict[str, Any]] = []
    prompt: list[str] = []
    for set_name in sets:
        found = [p for p in store.get_prompts(set_name) if p.id == prompt_id]
        if found and not prompt:
            prompt = list(found[0].turns)
        battles += [{"set": set_name, **row} for row in battle_rows(store.get_battles(None, set_name=set_name),
                                                                   prompt_id)]
        games += [_game(set_name, j) for j in store.get_judgments(None, set_name=set_name) if j.prompt_id == prompt_id]
    return {"prompt_id": prompt_id, "prompt": prompt, "examples": examples, "battles": battles, "games": games}


def _game(set_name: str, j: Judgment) -> dict[str, Any]:
    return {"set": set_name, "judge": j.judge, "model_a": j.model_a, "model_b": j.model_b, "verdict": j.verdict,
            "score_a": j.score_a, "score_b": j.score_b, "status": j.status, "explanation": j.explanation}
