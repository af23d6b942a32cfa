"""CLI of people's votes: ``arena vote`` (the vote page), the board of ``--judge human``, the voters' table.

Thin: the page and the schedule live in ``people``; here are options, printing and errors.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table

from ..people.quality import VoterFigures
from .consoles import stderr_console, stdout_console


def human_board(workspace: Path, json_out: bool, csv: Path | None, keep_flagged: bool) -> None:
    """Print the Bradley-Terry board of the workspace's votes (bootstrap over prompts), as other judges' boards."""
    from ..people.workspace import human_battles
    from ..rating.bt import RateOptions, leaderboard
    from ..rating.export import ratings_to_json, write_leaderboard_csv
    from ..store import Store
    from .peers import rating_settings
    from .tables import print_leaderboard

    battles, found = human_battles(workspace, keep_flagged)
    with Store(workspace, readonly=True) as store:
        settings = rating_settings(workspace, store.get_meta("config"))
    ratings = leaderboard(battles, RateOptions(**settings.model_dump()))
    if csv is not None:
        write_leaderboard_csv(ratings, csv)
    voters = len({v.voter for v in found.rated})
    both_bad = sum(v.verdict == "both_bad" for v in found.rated)
    line = (f"{len(found.rated)} votes by {voters} voter(s); {both_bad} 'both bad' rated as ties; controls and "
            f"undone votes not rated")
    if found.left_out:
        line += f"; left out, flagged: {', '.join(found.left_out)} (--keep-flagged counts them)"
    if json_out:
        sys.stdout.write(json.dumps(ratings_to_json(ratings), indent=2) + "\n")
        stderr_console().print(escape(line), highlight=False, soft_wrap=True)
        return
    print_leaderboard(ratings, title="leaderboard of people's votes (judge human)", caption=line)


def voter_table(figures: Sequence[VoterFigures]) -> Table:
    """Return the voters' figures: votes, controls failed, repeats consistent, fast votes, flag."""
    t = Table(title="voters", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("voter", "votes", "rated", "controls failed", "same on repeat", "too fast", "median s", "both bad",
                "flag"):
        t.add_column(col, justify="left" if col in ("voter", "flag") else "right", overflow="fold")
    for f in figures:
        t.add_row(escape(f.voter), str(f.votes), str(f.real), f"{f.control_fails} of {f.controls}",
                  f"{f.consistent} of {f.repeats}", str(f.fast),
                  "-" if f.median_seconds is None else f"{f.median_seconds:.1f}", str(f.both_bad),
                  escape("; ".join(f.reasons)) or "-")
    return t


def print_voters(figures: Sequence[VoterFigures]) -> None:
    stdout_console().print(voter_table(figures))
