"""The battle browser's data: a compact index (parsed at load) and text chunks (parsed on demand).

One row per (prompt, pair) the judge looked at: its battle when one came out, or "no verdict"
when every game failed. The index holds small integer columns (prompt, models, outcome, flags)
and a one-line snippet per prompt, so filtering 100,000 rows is a loop over arrays. The texts
(prompt turns, both answers and their reasoning, each game's scores and explanation) are in chunks of
``CHUNK`` rows, deduplicated per chunk, and parsed only when a row of the chunk is opened.

Everything here is data for ``JSON.parse`` and ``textContent``: :func:`json_for_html` escapes
``<``, ``>`` and ``&`` so no text can end the ``<script type="application/json">`` block it
sits in.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records import Answer, Battle, Judgment, Prompt

CHUNK = 500
SNIPPET = 110
OUTCOME = {"model_a": 0, "model_b": 1, "tie": 2}
NO_VERDICT = 3
FLAG_NAMES = ["answer addresses the judge", "failed verdict", "orders disagree", "cut off"]
FLAG_INJECTION, FLAG_FAILED, FLAG_DISAGREE, FLAG_CUT = 1, 2, 4, 8


def json_for_html(value: Any) -> str:
    """Return compact JSON that is safe inside a ``<script>`` element and as a JavaScript expression."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), 3)


@dataclass
class BrowserData:
    index: dict[str, Any]
    chunks: list[dict[str, Any]] = field(default_factory=list)
    token: str = ""


def _winner(j: Judgment) -> str | None:
    if j.verdict == "model_a":
        return j.model_a
    if j.verdict == "model_b":
        return j.model_b
    return None


def build_browser(prompts: Sequence[Prompt], answers: Sequence[Answer], judgments: Sequence[Judgment],
                  battles: Sequence[Battle], model_order: Sequence[str], *, chunk: int = CHUNK) -> BrowserData:
    """Return the index and chunks of every judged (prompt, pair), in prompt order then pair order."""
    pos = {p.id: i for i, p in enumerate(prompts)}
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}

    def group(pid: str, a: str, b: str) -> dict[str, Any]:
        x, y = sorted((a, b))
        key = (pid, x, y)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"pid": pid, "a": a, "b": b, "battle": None, "games": []}
        return g

    for j in judgments:
        if j.prompt_id in pos:
            group(j.prompt_id, j.model_a, j.model_b)["games"].append(j)
    for bt in battles:
        if bt.prompt_id in pos:
            g = group(bt.prompt_id, bt.model_a, bt.model_b)
            g["battle"], g["a"], g["b"] = bt, bt.model_a, bt.model_b

    models = list(model_order)
    for g in groups.values():
        for m in (g["a"], g["b"]):
            if m not in models:
                models.append(m)
    m_idx = {m: i for i, m in enumerate(models)}
    rows = sorted(groups.values(), key=lambda g: (pos[g["pid"]], m_idx[g["a"]], m_idx[g["b"]]))

    cats: list[str] = []
    cat_idx: dict[str, int] = {}
    prompt_cat = []
    for p in prompts:
        c = p.category or p.cluster or "-"
        if c not in cat_idx:
            cat_idx[c] = len(cats)
            cats.append(c)
        prompt_cat.append(cat_idx[c])
    answer_of = {(a.prompt_id, a.model): a for a in answers}

    cols: dict[str, list] = {k: [] for k in ("p", "a", "b", "o", "sa", "sb", "f")}
    chunks: list[dict[str, Any]] = []
    strings: list[str] = []
    s_idx: dict[str, int] = {}
    items: list[Any] = []

    def s(text: str) -> int:
        i = s_idx.get(text)
        if i is None:
            i = s_idx[text] = len(strings)
            strings.append(text)
        return i

    for n, g in enumerate(rows):
        a, b, bt, games = g["a"], g["b"], g["battle"], g["games"]
        flags = 0
        if any(j.flags for j in games):
            flags |= FLAG_INJECTION
        if any(j.status == "failed" for j in games):
            flags |= FLAG_FAILED
        winners = {_winner(j) for j in games if j.status == "ok"}
        if len([j for j in games if j.status == "ok"]) >= 2 and len(winners) > 1:
            flags |= FLAG_DISAGREE
        ans_a, ans_b = answer_of.get((g["pid"], a)), answer_of.get((g["pid"], b))
        if any(j.truncated for j in games) or any(x is not None and x.truncated for x in (ans_a, ans_b)):
            flags |= FLAG_CUT
        cols["p"].append(pos[g["pid"]])
        cols["a"].append(m_idx[a])
        cols["b"].append(m_idx[b])
        cols["o"].append(OUTCOME[bt.outcome] if bt is not None else NO_VERDICT)
        cols["sa"].append(_num(bt.score_a) if bt is not None else None)
        cols["sb"].append(_num(bt.score_b) if bt is not None else None)
        cols["f"].append(flags)

        prompt = prompts[pos[g["pid"]]]
        game_rows = []
        for j in games:
            game_rows.append([
                0 if j.model_a == a else 1,  # which of the row's models was shown first
                _num(j.score_a), _num(j.score_b), [_num(x) for x in j.scores_a], [_num(x) for x in j.scores_b],
                OUTCOME.get(j.verdict or "", NO_VERDICT), 0 if j.status == "ok" else 1,
                [s(f) for f in j.flags], s(j.explanation), s(j.raw[:4000]) if j.status == "failed" else -1,
                j.truncated,
            ])
        items.append([
            [s(t) for t in prompt.turns],
            [s(t) for t in ans_a.turns] if ans_a is not None else None,
            [s(t) for t in ans_b.turns] if ans_b is not None else None,
            game_rows,
            [s(r) for r in prompt.reference] if prompt.reference else None,
            # A reasoning model's thinking per turn, shown folded and apart: the judge never saw it.
            [[s(r) for r in x.reasoning] if x is not None and x.reasoning else None for x in (ans_a, ans_b)],
        ])
        if len(items) == chunk or n == len(rows) - 1:
            chunks.append({"s": strings, "r": items})
            strings, s_idx, items = [], {}, []

    snippets = [" ".join(p.turns[0].split())[:SNIPPET] for p in prompts]
    index = {
        "models": models, "cats": cats, "flags": FLAG_NAMES, "chunk": chunk, "n": len(rows),
        "prompts": {"id": [p.id for p in prompts], "snip": snippets, "cat": prompt_cat,
                    "turns": [len(p.turns) for p in prompts]},
        "rows": cols,
    }
    digest = hashlib.sha256(json_for_html(index).encode()).hexdigest()[:16]
    index["token"] = digest
    return BrowserData(index=index, chunks=chunks, token=digest)
