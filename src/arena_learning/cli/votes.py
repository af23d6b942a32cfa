"""CLI of people's votes: ``arena vote`` (the vote page), the board of ``--judge human``, the voters' table.

Thin: the page and the schedule live in ``people``; here are options, printing and errors.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal, cast

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..people.quality import VoterFigures
from .consoles import stderr_console
from .errors import reporting_errors

VOTE_HELP = (
    "Serve a page where people vote on two answers of the workspace (models hidden, sides random), on 127.0.0.1 "
    "until Ctrl-C.\n\n"
    "Each vote is stored at once in the workspace (voter, time shown, seconds taken); a share of the items are "
    "controls (one answer twice, an empty answer, a pair voted before in the other order) that give each voter's "
    "figures. A name is bound to the browser that takes it (or given by an invitation link, --voters); the models "
    "are named when a voter's session ends. While a run holds the workspace, votes wait in the page and are sent "
    "again until stored. "
    "`arena leaderboard WS --judge human` rates the votes; `arena judge-audit WS` compares the judges with them."
)


def register(app: typer.Typer) -> None:
    """Add the ``vote`` command to ``app``."""
    app.command("vote", help=VOTE_HELP)(vote_command)


def vote_command(
    workspace: Annotated[Path, typer.Argument(help="Workspace directory with answers to vote on.")],
    host: Annotated[str, typer.Option(
        help="Address to listen on; beyond 127.0.0.1 every request needs the token (made if not given).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port).")] = 8766,
    token: Annotated[str | None, typer.Option(
        help="A secret of at least 22 characters the page must send (it is in the URL printed); made for you "
             "beyond 127.0.0.1 when not given.")] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="A Host name to answer besides 127.0.0.1, localhost and --host (a reverse proxy's "
                             "public name); repeat for more.")] = None,
    voters: Annotated[Path | None, typer.Option(
        help="A file of voter names, one a line: only they vote, each by the invitation link printed.")] = None,
    reveal_every: Annotated[int, typer.Option(
        help="A voter's session ends, and its models are named, after this many votes (0: when the voter ends "
             "it).")] = 20,
    item_minutes: Annotated[float, typer.Option(help="An item shown can be voted on for this many minutes.")] = 30.0,
    set_name: Annotated[str, typer.Option("--set", help="The prompt set whose answers are voted on.")] = "test",
    schedule: Annotated[str, typer.Option(
        help="informative (close pairs on the votes so far, pairs the judges disagree on, even spread over "
             "models and categories) or random pairs.")] = "informative",
    control_share: Annotated[float, typer.Option(
        help="Share of each voter's items that are controls (0 to 0.5).")] = 0.25,
    fast_seconds: Annotated[float, typer.Option(
        help="Rule: a vote quicker than this is too fast to have been read.")] = 2.0,
    max_control_fail: Annotated[float, typer.Option(
        help="Rule: flag a voter who fails more than this share of the controls (after 6).")] = 0.34,
    min_consistency: Annotated[float | None, typer.Option(
        help="Rule: flag a voter whose repeats agree less than this share (after 3; default: never).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the draws.")] = 0,
) -> None:
    """Serve the vote page (help text: ``VOTE_HELP``)."""
    from ..httpd import serve_until_stopped
    from ..people.quality import VoterRule
    from ..people.schedule import ScheduleOptions
    from ..people.server import VoteServer, VoteSettings

    with reporting_errors():
        mode = cast(Literal["informative", "random"], schedule)  # ScheduleOptions checks it
        options = ScheduleOptions(mode=mode, control_share=control_share, seed=seed)
        rule = VoterRule(fast_seconds=fast_seconds, max_control_fail=max_control_fail, min_consistency=min_consistency)
        names = None if voters is None else voter_list(voters)
        server = VoteServer(workspace, VoteSettings(
            host=host, port=port, token=token, allow_hosts=tuple(allow_host or ()), set_name=set_name,
            schedule=options, rule=rule, item_ttl_s=item_minutes * 60, reveal_every=reveal_every, voters=names))
    err = stderr_console()
    if server.note:
        err.print(f"[yellow]note:[/] {escape(server.note)}", highlight=False, soft_wrap=True)
    pool = server.app.pool
    lines = [f"vote page of {workspace} ({len(pool)} pairs on {len(pool.prompt_ids)} prompts, {len(pool.models)} "
             f"models) at {server.url} (Ctrl-C stops)",
             f"the organiser's page (every voter's figures; keep it to yourself): {server.organiser_url}"]
    if server.invitations:
        lines.append("invitation links, one per voter (each lets only that voter in):")
        lines += [f"  {name}: {url}" for name, url in server.invitations.items()]
    for line in lines:
        err.print(escape(line), highlight=False, soft_wrap=True)

    serve_until_stopped(server)


def voter_list(path: Path) -> tuple[str, ...]:
    """Return the voter names of a file, one a line (blank lines and ``#`` comments skipped); ArenaError when none."""
    from ..errors import ArenaError

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ArenaError(f"--voters {path}: cannot read it ({err}): give a UTF-8 text file, one name a line") from None
    names = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    bad = next((n for n, name in enumerate(names) if len(name) > 80), None)
    if not names or bad is not None or len(set(names)) < len(names):
        where = f" (line of {names[bad][:20]!r}...: over 80 characters)" if bad is not None else ""
        raise ArenaError(f"--voters {path}: give one name a line, each once, at most 80 characters{where}")
    return tuple(names)


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


def disagreement_table(rows: Sequence[dict], limit: int = 10) -> Table:
    """Return the first ``limit`` battles where a judge and the people's votes disagree (most votes first)."""
    title = f"where the judges and the votes disagree ({min(limit, len(rows))} of {len(rows)}; --json lists all)"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("judge", "prompt", "category", "first", "second", "judge says", "people say", "votes"):
        t.add_column(col, overflow="fold")
    for d in rows[:limit]:
        t.add_row(*(escape(str(d[k])) for k in ("judge", "prompt_id", "category", "first", "second", "judge_says",
                                                   "people_say", "votes")))
    return t
