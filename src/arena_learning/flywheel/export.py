"""Export harvested data in the formats TRL reads: JSONL, Parquet and Hugging Face dataset folders.

SFT: ``{"messages": [...]}`` (TRL's conversational language-modeling format); preference pairs
(DPO and reward model): ``{"prompt": [...], "chosen": [...], "rejected": [...], "margin": x}``
(TRL's conversational preference format with an explicit prompt; RewardTrainer reads
``margin``). Provenance columns ride along: prompt id, slice, round, the models that supplied
the answers, their scores and the selection that picked them. TRL's trainers ignore columns they
do not use.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .harvest import PreferenceItem, SFTItem

FORMATS = ("jsonl", "parquet", "hf")


def sft_rows(items: Sequence[SFTItem]) -> list[dict[str, Any]]:
    """Return one TRL conversational row per SFT example, provenance included."""
    return [it.model_dump() for it in items]


def pair_rows(items: Sequence[PreferenceItem]) -> list[dict[str, Any]]:
    """Return one TRL preference row (prompt, chosen, rejected, margin) per pair, provenance included."""
    rows = []
    for it in items:
        d = it.model_dump()
        rows.append({"prompt": d.pop("prompt"), "chosen": d.pop("chosen"), "rejected": d.pop("rejected"),
                     "margin": float(d.pop("margin")), **d})
    return rows


def format_of(path: str | Path, fmt: str | None = None) -> str:
    """Return the export format: ``fmt`` if given, else by the path's suffix (a folder: hf)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    return {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(suffix, "hf")


def _empty_like(kind: str) -> dict[str, Any]:
    """Return a row of ``kind`` ('sft' or 'pairs'), to give an empty export its columns."""
    turn = [{"role": "user", "content": ""}]
    if kind == "pairs":
        return pair_rows([PreferenceItem(prompt=turn, chosen=turn, rejected=turn, prompt_id="", chosen_score=0.0,
                                         rejected_score=0.0)])[0]
    return sft_rows([SFTItem(messages=turn, prompt_id="", score=0.0, target_score=0.0)])[0]


def write_rows(rows: list[dict[str, Any]], path: str | Path, fmt: str | None = None, kind: str = "sft") -> Path:
    """Write ``rows`` to ``path`` as JSONL, Parquet or a Hugging Face dataset folder (``save_to_disk``).

    The file (or folder) appears under its name only when complete. No rows still give the
    columns of ``kind`` (Parquet and dataset folders), so an empty export loads.
    """
    path = Path(path)
    shape, kind = kind, format_of(path, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if kind == "jsonl":
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return path
    if rows:
        ds = to_dataset(rows)
    else:
        from datasets import Dataset

        features = to_dataset([_empty_like(shape)]).features
        ds = Dataset.from_dict({name: [] for name in features}, features=features)
    if kind == "parquet":
        ds.to_parquet(str(tmp))
        os.replace(tmp, path)
        return path
    shutil.rmtree(tmp, ignore_errors=True)
    ds.save_to_disk(str(tmp))
    if path.exists():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    os.replace(tmp, path)
    return path


def to_dataset(rows: list[dict[str, Any]]):
    """Return ``rows`` as a ``datasets.Dataset`` (an empty one keeps no columns)."""
    from datasets import Dataset

    return Dataset.from_list(rows)


def export_items(items: Sequence[SFTItem] | Sequence[PreferenceItem], path: str | Path, fmt: str | None = None,
                 kind: str | None = None) -> Path:
    """Write SFT examples or preference pairs to ``path`` in TRL's format.

    ``kind`` ('sft' or 'pairs') gives an empty export its columns; by default it is the items' kind.
    """
    items = list(items)  # type: ignore[assignment]  # a list of the same items (a generator is read once)
    if kind is None:
        kind = "pairs" if items and isinstance(items[0], PreferenceItem) else "sft"
    rows = pair_rows(items) if kind == "pairs" else sft_rows(items)  # type: ignore[arg-type]  # kind says which items these are
    return write_rows(rows, path, fmt, kind)


def read_items(path: str | Path) -> list[SFTItem] | list[PreferenceItem]:
    """Read back a JSONL export written by ``export_items``."""
    out: list[Any] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            out.append(PreferenceItem.model_validate(row) if "chosen" in row else SFTItem.model_validate(row))
    return out
