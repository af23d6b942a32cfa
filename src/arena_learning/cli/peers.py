"""CLI commands for other tools' verdicts: ``arena import-judgments``, ``arena export-judgments``, and
the arena-hard headline behind ``arena leaderboard WS --baseline MODEL``.

Thin: read files or the workspace, call :mod:`arena_learning.arena.peers` and
:mod:`arena_learning.rating.baseline`, print a table (or JSON on stdout). Errors the user can fix
are ``ArenaError``: printed on stderr, exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..arena.peers import (
    ARENA_HARD_BASELINE,
    FORMATS,
    peer_battles,
    read_judgments,
    write_arena_hard,
    write_fastchat_pair,
    write_fastchat_single,
)
from ..config import RatingConfig
from ..errors import ArenaError
from ..records import Battle, Rating
from ..store import Store, grade_battles
from .consoles import print_manifest_line, stderr_console, stdout_console, write_csv_manifest
from .errors import reporting_errors

if TYPE_CHECKING:
    from ..rating.baseline import BaselineRate  # numpy: loaded by the one command that rates against a baseline

IMPORT_HELP = (
    "Import published judgments: arena-hard-auto model_judgment JSONL (games with [[A>>B]] labels), FastChat "
    "MT-Bench pairwise (g1_winner/g2_winner) or single (score) judgment JSONL.\n\n"
    "The games are stored as the judge's judgments and turned into battles by the file's own tool's rules "
    "(arena-hard: each game a battle, strong verdicts counted --strong-weight times; FastChat pairwise: a tie "
    "unless both orders agree; single: the higher grade wins, a grade of -1 or null is kept as a failed grading). "
    "Records that cannot be read are counted by reason (reason, count, first file:line); --strict imports "
    "nothing when any is. Files may be gzipped (.jsonl.gz). Rate them with `arena leaderboard WS --baseline M` "
    "or audit them with `arena judge-audit WS --compare-judge OTHER`."
)
EXPORT_HELP = (
    "Export a judge's games in arena-hard-auto's or FastChat's judgment format, so other tools can read them.\n\n"
    "arena-hard: OUT is a directory of <model>.jsonl files of the games against --baseline; fastchat-pair and "
    "fastchat-single: OUT is one JSONL file. Pairwise formats need each pair judged in both orders."
)
_META = "peer_judges"  # store meta: judge name -> {format, baseline, strong_weight} of its imports


def register(app: typer.Typer) -> None:
    """Add the ``import-judgments`` and ``export-judgments`` commands to ``app``."""
    app.command("import-judgments", help=IMPORT_HELP)(import_judgments_command)
    app.command("export-judgments", help=EXPORT_HELP)(export_judgments_command)


def import_judgments_command(
    files: Annotated[list[Path], typer.Argument(help="judgment JSONL files (arena-hard or FastChat)")],
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="workspace to store the judgments in")],
    fmt: Annotated[str, typer.Option("--format", help=f"auto, or one of: {', '.join(FORMATS)}")] = "auto",
    baseline: Annotated[str, typer.Option(
        help="arena-hard: the baseline model the games were played against (not in the files)")] = ARENA_HARD_BASELINE,
    judge: Annotated[str | None, typer.Option(help="judge name to store them under (default: the files' own)")] = None,
    strong_weight: Annotated[int, typer.Option(
        "--strong-weight", min=1, help="arena-hard: battles a [[A>>B]] / [[B>>A]] game counts as")] = 3,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Import nothing when any record is skipped (the skip table says which and why).")] = False,
) -> None:
    """Import judgment files into a workspace (help text: ``IMPORT_HELP``)."""
    err = stderr_console()
    with reporting_errors():
        report = read_judgments(files, baseline=baseline, judge=judge, fmt=fmt)
        if report.skips and (strict or not report.judgments):
            err.print(skip_table(report.skip_table()))
        if not report.judgments:
            first = f"; first problem: {report.skipped[0]}" if report.skipped else ""
            raise ArenaError(f"no judgments in {', '.join(map(str, files))} ({len(report.skipped)} records "
                             f"skipped{first}): nothing was imported; give arena-hard or FastChat judgment JSONL")
        if strict and report.skips:
            raise ArenaError(f"--strict: {len(report.skips)} records cannot be imported (reasons above): nothing "
                             "was imported; fix them, or import without --strict to skip them")
        if len(report.formats) > 1:
            raise ArenaError(f"the files mix judgment formats ({', '.join(sorted(report.formats))}): import each "
                             "format on its own (battles are made by each format's rules)")
        kind = report.formats.pop()
        with Store(workspace) as store:
            peers = store.get_meta(_META, {}) or {}
            for name in report.judges:
                known = peers.get(name)
                existing = store.get_judgments(name)
                if known is None and existing:
                    raise ArenaError(f"judge {name!r} already holds judgments of a run in {workspace}: import these "
                                     "under another name with --judge")
                if known and known["format"] != kind:
                    raise ArenaError(f"judge {name!r} in {workspace} holds {known['format']} judgments; these are "
                                     f"{kind}: import them under another name with --judge")
                mine = [j for j in report.judgments if j.judge == name]
                if kind == "fastchat-single":
                    # Each grade stored once; its pairwise games and battles are derived when read. A new file
                    # adds to what the judge had: the same answer's grade replaced, others kept.
                    grades = {(g.prompt_id, g.model): g for g in store.get_grades(name)}
                    grades.update({(g.prompt_id, g.model): g for g in report.grades if g.judge == name})
                    store.replace_grades(name, grades.values())
                    battles = grade_battles(grades.values())
                else:
                    # A new file adds to what the judge had: same game (prompt, order) replaced, others kept.
                    games = {(j.prompt_id, j.model_a, j.model_b): j for j in existing}
                    games.update({(j.prompt_id, j.model_a, j.model_b): j for j in mine})
                    battles = peer_battles(games.values(), kind, strong_weight)
                    store.replace_judgments([name], games.values())
                    store.replace_battles(name, battles)
                peers[name] = {"format": kind, "baseline": baseline if kind == "arena-hard" else None,
                               "strong_weight": strong_weight}
                failed = sum(1 for j in mine if j.status != "ok")
                err.print(escape(f"judge {name}: {len(mine)} {kind} games imported ({failed} failed), "
                                 f"{len(battles)} battles in all"), highlight=False, soft_wrap=True)
            store.set_meta(_META, peers)
    if report.failed_grades:
        err.print(f"{report.failed_grades} grades marked failed (score -1 or null) kept as failed gradings: "
                  "`arena scores` counts them", highlight=False, soft_wrap=True)
    if report.skips:
        err.print(skip_table(report.skip_table()))
        err.print(f"[yellow]{len(report.skipped)} records skipped[/] (see the table; --strict makes this an error)",
                  highlight=False)


def skip_table(rows: list[tuple[str, int, str]]) -> Table:
    """Return the skipped records as a table: reason, count, first file:line (user text printed as it is)."""
    table = Table(title="records skipped", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("reason")
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("first at", no_wrap=True)
    for reason, count, where in rows:
        table.add_row(escape(reason), str(count), escape(where))
    return table


def export_judgments_command(
    workspace: Annotated[Path, typer.Argument(help="workspace directory")],
    fmt: Annotated[str, typer.Option("--format", help=f"one of: {', '.join(FORMATS)} (arena-hard: records carry "
                                                      "both v0.1's question_id and v2.0's uid; fastchat-*: "
                                                      "FastChat llm_judge's MT-Bench files)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="arena-hard: a directory; FastChat: a JSONL file")],
    judge: Annotated[str | None, typer.Option(help="the judge to export (default: the workspace's only one)")] = None,
    baseline: Annotated[str | None, typer.Option(
        help="arena-hard: the baseline model (default: the run's battle baseline or the import's)")] = None,
) -> None:
    """Export a judge's games (help text: ``EXPORT_HELP``)."""
    with reporting_errors():
        if fmt not in FORMATS:
            raise ArenaError(f"unknown judgment format {fmt!r}: use one of {', '.join(FORMATS)}")
        with Store(workspace, readonly=True) as store:
            name = _pick_judge(store, judge, [j.judge for j in store.get_judgments()])
            judgments = store.get_judgments(name)
            if fmt == "arena-hard":
                base = baseline or _default_baseline(store, name)
                categories = {p.id: p.category for s in store.prompt_sets() for p in store.get_prompts(s)
                              if p.category}
                report = write_arena_hard(judgments, base, out, categories)
            elif fmt == "fastchat-pair":
                report = write_fastchat_pair(judgments, out)
            else:
                report = write_fastchat_single(judgments, out, grades=store.get_grades(name))
    err = stderr_console()
    err.print(escape(f"judge {name}: {report.records} {fmt} records written to {out}"), highlight=False)
    if report.left_out:
        err.print(f"[yellow]{report.left_out} pairs left out: judged in one order only ({fmt} needs both)",
                  highlight=False)


def _pick_judge(store: Store, judge: str | None, names: list[str]) -> str:
    """Return ``judge``, else the saved run's judge, else the only judge in ``names``; ArenaError otherwise."""
    have = sorted(set(names))
    if judge is not None:
        if judge not in have:
            raise ArenaError(f"judge {judge!r} has nothing in {store.root} (judges there: {', '.join(have) or 'none'})")
        return judge
    saved = store.get_meta("config")
    if isinstance(saved, dict) and (saved.get("judge") or {}).get("name", "verifier") in have:
        return saved["judge"].get("name", "verifier")
    if len(have) == 1:
        return have[0]
    raise ArenaError(f"{store.root} has {'no judges' if not have else 'several judges: ' + ', '.join(have)}; "
                     "name one with --judge")


def _default_baseline(store: Store, judge: str) -> str:
    peer = (store.get_meta(_META, {}) or {}).get(judge) or {}
    saved = store.get_meta("config")
    base = peer.get("baseline") or (saved.get("battles", {}).get("baseline") if isinstance(saved, dict) else None)
    if not base:
        raise ArenaError(f"no baseline known for judge {judge!r}: give the model the games were played against "
                         "with --baseline")
    return base


def _judge_battles(workspace: Path, judge: str | None) -> tuple[str, list[Battle], RatingConfig]:
    """Return (judge, its battles, the rating settings: the saved run's, else the defaults); ``human``: the votes."""
    with Store(workspace, readonly=True) as store:
        judges = list(store.info()["judges"])
        saved = store.get_meta("config")
        if judge == "human" and judge not in judges:
            name, battles = judge, None
        else:
            name = _pick_judge(store, judge, judges)
            battles = store.get_battles(name)
    if battles is None:
        from ..people.workspace import human_battles

        battles = human_battles(workspace)[0]
    return name, battles, rating_settings(workspace, saved)


def rating_settings(workspace: Path, saved: object) -> RatingConfig:
    """Return the rating settings of the run config ``saved`` in ``workspace``, else the defaults."""
    ratings = saved.get("ratings", {}) if isinstance(saved, dict) else {}
    try:
        return RatingConfig.model_validate(ratings)
    except ValueError as err:
        raise ArenaError(f"the rating settings saved in {workspace} do not validate ({err}); rerun `arena run` "
                         "to refresh them") from None


def judge_ratings(workspace: Path, judge: str | None) -> tuple[str, list[Rating]]:
    """Return (judge, the Bradley-Terry leaderboard of its battles), as ``arena leaderboard WS --judge J`` rates."""
    from ..rating.bt import RateOptions, leaderboard

    name, battles, r = _judge_battles(workspace, judge)
    if not battles:
        raise ArenaError(f"judge {name!r} has no battles in {workspace}: nothing to rate")
    return name, leaderboard(battles, RateOptions(**r.model_dump()))


def judge_board(workspace: Path, judge: str | None, json_out: bool, csv: Path | None = None) -> list[Rating]:
    """Print the Bradley-Terry leaderboard of one judge's battles (imported judgments need no run config)."""
    from ..pipeline import workspace_manifest
    from ..rating.export import ratings_to_json, write_leaderboard_csv
    from .tables import print_leaderboard

    name, ratings = judge_ratings(workspace, judge)
    found = workspace_manifest(workspace, name)
    if csv is not None:
        write_leaderboard_csv(ratings, csv)
        stderr_console().print(f"manifest: {write_csv_manifest(csv, found)}", highlight=False)
    if json_out:
        sys.stdout.write(json.dumps(ratings_to_json(ratings), indent=2) + "\n")
    else:
        print_leaderboard(ratings, title=f"leaderboard of judge {name}")
        print_manifest_line(found)
    return ratings


def baseline_board(workspace: Path, baseline: str, json_out: bool, judge: str | None = None) -> list[BaselineRate]:
    """Print arena-hard's headline for a workspace: win rate against ``baseline`` with a bootstrap 95% CI."""
    from ..rating.baseline import baseline_win_rates

    name, battles, r = _judge_battles(workspace, judge)
    rounds = r.bootstrap
    rows = baseline_win_rates(battles, baseline, bootstrap=rounds, seed=r.seed)
    from ..pipeline import workspace_manifest

    if json_out:
        out = [{"model": r.model, "win_rate": r.win_rate, "ci_low": r.ci_low, "ci_high": r.ci_high, "wins": r.wins,
                "ties": r.ties, "losses": r.losses, "prompts": r.prompts} for r in rows]
        sys.stdout.write(json.dumps({"judge": name, "baseline": baseline, "bootstrap": rounds, "rows": out,
                                     "manifest": workspace_manifest(workspace, name)}, indent=2) + "\n")
        return rows
    stdout_console().print(baseline_table(rows, baseline, name, rounds))
    print_manifest_line(workspace_manifest(workspace, name))
    return rows


def baseline_table(rows: list[BaselineRate], baseline: str, judge: str, rounds: int) -> Table:
    """Return the headline as a table: win rate (%) against the baseline, 95% CI, weighted W/T/L, prompts."""
    table = Table(title=f"win rate against {baseline} (judge {judge}; ties as half; 95% CI from {rounds} "
                        "bootstrap rounds over prompts; a strong verdict counts by its weight)", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for col in ("model", "win rate", "95% CI", "wins", "ties", "losses", "prompts"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in rows:
        ci = "-" if r.ci_low is None or r.ci_high is None else \
            f"(-{100 * (r.win_rate - r.ci_low):.1f} / +{100 * (r.ci_high - r.win_rate):.1f})"
        counts = ["", "", ""] if r.model == baseline else [f"{r.wins:g}", f"{r.ties:g}", f"{r.losses:g}"]
        table.add_row(escape(r.model), f"{100 * r.win_rate:.1f}%", ci, *counts, str(r.prompts))
    return table
