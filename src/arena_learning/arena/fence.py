"""Answer text is data, not instructions: the fences of judge prompts.

The fencing lives in :mod:`arena_learning.engines.structured`, shared with the
difficulty and moderation judges of ``curate``; this module names it for the
arena. Each piece of user or assistant text goes into the judge prompt between
markers ``<<<NAME id>>>`` and ``<<<END NAME id>>>``; the id is a hash of all
the texts of the prompt, so an answer cannot know it in advance and so cannot
close its own fence, and marker-like runs inside a text are broken up
(``<<<`` becomes ``< < <``). The id is deterministic, so the same battle gives
the same prompt and the ledger still caches it.

Answers that try to talk to the judge are flagged in the judgment record
(:func:`injection_flags`, cached per answer text); the judge's system prompt
tells it to count such attempts against the answer.
"""

from __future__ import annotations

from ..engines.structured import fence, fence_id, injection_flags, sanitize

__all__ = ["fence", "fence_id", "injection_flags", "sanitize"]
