"""What counts as an answer in a reply: empty, cut off, and the ledger's words for an empty one.

The rules of the ledger road (``engines.calls``) that a batch job's replies (``engines.batch_lines``) are held
to as well, so a reply means the same whichever road brought it.
"""

from __future__ import annotations

from .base import Completion

KEPT_EMPTY = "empty reply kept as the model's answer"
"""The note in a success row's ``error`` that marks an empty reply kept after its retries."""


def is_empty(comp: Completion) -> bool:
    """Return whether ``comp`` has no answer in it (no text, or whitespace only)."""
    return not comp.text or comp.text.isspace()


def is_truncated(comp: Completion) -> bool:
    """Return whether ``comp`` was cut off at max_tokens."""
    return comp.finish_reason == "length"


def empty_error(comp: Completion) -> str:
    """Return the ledger's error message for an empty completion."""
    if comp.reasoning:
        return (f"no answer after {len(comp.reasoning)} characters of reasoning (finish_reason="
                f"{comp.finish_reason or 'none'}): raise max_tokens if it ran out; retried on the next run")
    return (f"empty completion (finish_reason={comp.finish_reason or 'none'}): no text came back; "
            "retried on the next run")
