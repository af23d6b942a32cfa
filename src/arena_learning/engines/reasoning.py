"""Reasoning text is not the answer: it is split off, kept apart, and never judged or trained on.

Reasoning models return their thinking either in a separate field (``message.reasoning_content``
from DeepSeek and vLLM's reasoning parsers, ``message.reasoning`` from others, read by the openai
engine) or inline as ``<think>...</think>`` before the answer (Qwen3, DeepSeek-R1 distills served
without a parser; their chat template often writes the opening tag itself, so the reply starts in
the middle of the block and only ``</think>`` appears). A judge shown the thinking would grade it,
and harvested SFT data would teach the target to imitate it: :func:`split_reasoning` is applied to
every completion on the ledger road (``engines.calls``), so the answer text never holds it.
"""

from __future__ import annotations

import re

from ..records import Answer
from .base import Completion

_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_OPEN = "<think>"
_CLOSE = "</think>"


def split_think(text: str) -> tuple[str, str]:
    """Return ``(answer, reasoning)``: ``text`` without its ``<think>`` blocks, and what they held.

    A reply with ``</think>`` and no opening tag (the template wrote it) is reasoning up to that
    tag; a reply with an opening tag never closed (cut off while thinking) is reasoning from it on.
    """
    if _OPEN not in text and _CLOSE not in text:
        return text, ""
    parts: list[str] = []
    head, sep, rest = text.partition(_CLOSE)
    if sep and _OPEN not in head:
        parts.append(head)
        text = rest
    parts.extend(m.group(1) for m in _BLOCK.finditer(text))
    text = _BLOCK.sub("", text)
    head, sep, rest = text.partition(_OPEN)
    if sep:  # opened and never closed
        parts.append(rest)
        text = head
    return text.strip(), "\n\n".join(p.strip() for p in parts if p.strip())


def split_reasoning(comp: Completion) -> Completion:
    """Return ``comp`` with any ``<think>`` blocks moved from its text to its reasoning, and its reasoning counted.

    Without a count from the server (``completion_tokens_details.reasoning_tokens``), the reasoning's
    tokens are its share of the output tokens by characters.
    """
    answer, thought = split_think(comp.text)
    reasoning = "\n\n".join(r for r in (comp.reasoning, thought) if r)
    if not reasoning:
        return comp
    tokens = comp.reasoning_tokens
    if not tokens and comp.tokens_out:
        tokens = round(comp.tokens_out * len(reasoning) / max(1, len(reasoning) + len(answer)))
    return comp.model_copy(update={"text": answer, "reasoning": reasoning, "reasoning_tokens": tokens})


def split_answer_reasoning(answer: Answer) -> Answer:
    """Return ``answer`` with ``<think>`` blocks moved from its turns to its reasoning (imported answer files)."""
    pairs = [split_think(t) for t in answer.turns]
    if not any(thought for _, thought in pairs):
        return answer
    old = answer.reasoning or [""] * len(pairs)
    reasoning = ["\n\n".join(r for r in (before, thought) if r) for before, (_, thought) in zip(old, pairs)]
    return answer.model_copy(update={"turns": [text for text, _ in pairs], "reasoning": reasoning})
