"""What several command modules share (so that none imports another): option overrides such as ``--ray``, and
``arena leaderboard``'s modes as one typed object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import ArenaError


def ray_overrides(address: str | None) -> list[str]:
    """Return the config overrides that ``--ray ADDRESS`` stands for."""
    if address is None:
        return []
    return ["scale.backend=ray", f"scale.address={'null' if address == 'local' else address}"]


BoardMode = Literal["manifest", "diff", "baseline", "judge", "human", "style", "gaps", "groups", "board"]
"""The kinds of output ``arena leaderboard`` gives: the run's manifest, two models compared (``--diff``),
win rates against a model (``--baseline``), a judge's board (``--judge``, or a workspace of imported
judgments), the board of people's votes (``--judge human``), style control, one board per group (``--by``),
or the run's board."""


@dataclass(frozen=True)
class LeaderboardOptions:
    """The options of ``arena leaderboard`` that choose what it prints, checked together (``mode``).

    A new kind of board is a new mode here: the options that ask for it, and those it goes without.
    ``--json`` goes with every mode; ``--judge`` also picks the judge of ``--diff`` and ``--baseline``.
    """

    by: str | None = None
    csv: Path | None = None
    style_control: bool = False
    baseline: str | None = None
    judge: str | None = None
    diff: tuple[str, str] | None = None
    manifest: bool = False
    target: str | None = None
    keep_flagged: bool = False

    def mode(self, imported_only: Callable[[], bool]) -> BoardMode:
        """Return the output asked for; raise ArenaError for options that ask for two kinds of board.

        ``imported_only``: whether the workspace holds imported judgments and no run (asked only when no
        option chose a board: such a workspace shows its judge's board).
        """
        if self.manifest:
            return "manifest"
        if self.keep_flagged and self.judge != "human":
            raise ArenaError("--keep-flagged counts flagged voters' votes: give it with --judge human")
        if self.target is not None:  # --judge picks whose battles
            if self.by is None or self.diff is not None or self.baseline is not None or self.style_control \
                    or self.csv is not None:
                raise ArenaError("--target shows a model's gaps per group: give it with --by category, cluster or "
                                 "subset, and without --diff, --baseline, --style-control and --csv")
            return "gaps"
        if self.diff is not None:
            if self.by is not None or self.style_control or self.baseline is not None or self.csv is not None:
                raise ArenaError("--diff compares two models: it goes without --by, --style-control, --baseline "
                                 "and --csv")
            return "diff"
        chosen = self.judge is not None or self.baseline is not None or self.by is not None or self.style_control
        if self.baseline is not None or self.judge is not None or (not chosen and imported_only()):
            if self.by is not None or self.style_control:
                raise ArenaError("--baseline and --judge go without --by and --style-control: give one kind of board")
            if self.baseline is not None:
                return "baseline"
            return "human" if self.judge == "human" else "judge"
        if self.by is not None and (self.style_control or self.csv is not None):
            raise ArenaError("--by prints one board per group: it goes without --style-control and --csv")
        if self.style_control:
            return "style"
        if self.by is not None:
            return "gaps" if self.target is not None else "groups"
        return "board"
