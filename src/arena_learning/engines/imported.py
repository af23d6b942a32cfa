"""The ``imported`` engine: a contestant whose answers were loaded into the workspace.

Answers come from ``arena import-answers``, so there is no model to run: the stages read the
answers from the store (its registry entry says ``makes_calls=False``) and ask nothing of it;
a call that reaches it anyway is an error that says so, never a failed call in the ledger.
"""

from __future__ import annotations

from ..engine_kinds import ENGINE_KINDS
from ..errors import EngineError
from .base import Completion, Engine, Request


class ImportedEngine(Engine):
    """Answers only from the workspace: asking it for a completion is an error."""

    kind = "imported"

    async def complete(self, request: Request) -> Completion:
        runs = ", ".join(k.name for k in ENGINE_KINDS.values() if k.makes_calls)
        raise EngineError(f"model {self.spec.name!r} is imported (its answers come from `arena import-answers`): "
                          f"it has no model to ask; give it an engine that runs one ({runs})")
