"""CLI command ``arena prompt-board``: the leaderboard of one prompt, from the battles of its nearest test prompts.

Thin: open the workspace read-only, call ``pipeline.stage_prompt_board``, print the neighbours and the board
(or JSON) on stdout; the fit's warnings on stderr. Errors the user can fix are ``ArenaError``: exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..store import Store
from .consoles import stderr_console, stdout_console
from .errors import user_errors
from .tables import leaderboard_table

DEFAULT_K = 50

HELP = (
    "The leaderboard of one prompt: a Bradley-Terry board fitted on the battles of the K test prompts nearest to "
    "it (cosine similarity of all-MiniLM-L6-v2 embeddings, the bundled model), with 95% CIs by bootstrap over "
    "those prompts, and the neighbours listed. Give the prompt as text (--prompt) or as the id of a test prompt "
    "(--id; that prompt is its own nearest neighbour).\n\n"
    "It is not a better predictor of who wins than the global board: on the flywheel quickstart's held-out "
    "battles (benchmarks/bench_prompt_board.py, figures on docs/results.md) its log-loss was lower but it named "
    "the winner less often at most K; at the default K its accuracy was not lower beyond chance. To predict, use "
    "`arena leaderboard`; this board shows which models do well near a prompt.")


def register(app: typer.Typer) -> None:
    """Add the ``prompt-board`` command to ``app``."""
    app.command("prompt-board", help=HELP)(prompt_board_command)


@user_errors
def prompt_board_command(
    workspace: Annotated[Path, typer.Argument(help="Workspace directory with battles on its test set.")],
    prompt: Annotated[str | None, typer.Option("--prompt", help="The prompt's text.")] = None,
    prompt_id: Annotated[str | None, typer.Option("--id", help="The id of a test prompt.")] = None,
    k: Annotated[int | None, typer.Option(
        "--k", "-k", help=f"Nearest test prompts whose battles are rated (default {DEFAULT_K}, or every test prompt "
                          "when there are fewer); a smaller K gives a board closer to the prompt, with wider CIs.",
        show_default=False)] = None,
    judge: Annotated[str | None, typer.Option(
        help="Whose battles (default: the run's judge, or the only judge with test-set battles).")] = None,
    bootstrap: Annotated[int | None, typer.Option(
        "--bootstrap", "-b", min=0, help="Bootstrap rounds of the 95% CIs (default: the run's, at least 100).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the neighbours and the board as JSON.")] = False,
) -> None:
    """Print the board of one prompt (help text: ``HELP``)."""
    from ..pipeline import stage_prompt_board

    with Store(workspace, readonly=True) as store:
        found = stage_prompt_board(store, text=prompt, prompt_id=prompt_id, k=k, judge=judge, bootstrap=bootstrap)
    if json_out:
        sys.stdout.write(json.dumps(found.as_dict(), indent=2) + "\n")
        return
    near = Table(title=f"the {found.k} nearest test prompts ({found.battles} battles)", title_justify="left",
                 box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    near.add_column("id", no_wrap=True)
    near.add_column("similarity", justify="right", no_wrap=True)
    near.add_column("prompt", overflow="fold")
    for n in found.neighbours:
        near.add_row(escape(n.id), f"{n.similarity:.3f}", escape(n.text))
    out = stdout_console()
    out.print(near)
    out.print(leaderboard_table(found.board, title=escape(f"leaderboard of {prompt_id or 'the prompt'} "
                                                          f"(its {found.k} nearest test prompts)")))
    for w in found.warnings:
        stderr_console().print("[yellow]" + escape(w), highlight=False, soft_wrap=True)
