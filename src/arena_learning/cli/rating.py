"""CLI commands of the rating stage: ``arena ratings`` and ``arena compare``.

Thin: read the input, call the stage function, print a table or JSON. Errors the user can
fix are ``ArenaError``: printed on stderr, exit code 2. Warnings about the data (no exact
ratings, skipped rows) go to stderr, so ``--json`` output stays machine-readable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ArenaError
from ..rating.export import ratings_to_json, write_leaderboard_csv
from .errors import reporting_errors as _user_errors
from .tables import fmt as _fmt
from .tables import print_leaderboard

__all__ = ["compare_command", "ratings_command", "ratings_to_json", "register", "write_leaderboard_csv"]


RATINGS_HELP = (
    "Rate the battles of a battle log (e.g. a public Chatbot Arena dump) with Bradley-Terry and bootstrap "
    "intervals.\n\n"
    "Prints rating, 95% interval, rank and rank with CI (1 + number of models confidently better) per model. "
    "Rows with an unknown winner or a missing model are counted on stderr, not rated."
)
COMPARE_HELP = (
    "Compare leaderboard BOARD_A with the reference leaderboard BOARD_B over the models on both.\n\n"
    "Prints Spearman and Kendall correlation, agreement with 95% CI, separability with 95% CI, the pair-rank "
    "Brier score and WizardArena's average consistency. Known CSV layouts (arena-hard, AlpacaEval, "
    "`arena ratings --csv`) are recognised by their columns; a directory is read as an arena workspace. "
    "The --model-col, --score-col, --lower-col and --upper-col options name the columns of the reference "
    "BOARD_B only; BOARD_A's layout is always recognised by its columns."
)


def register(app: typer.Typer) -> None:
    """Add the ``ratings`` and ``compare`` commands to ``app``."""
    app.command("ratings", help=RATINGS_HELP)(ratings_command)
    app.command("compare", help=COMPARE_HELP)(compare_command)


def ratings_command(
    battles: Annotated[Path, typer.Argument(
        help="Battle log in the Chatbot Arena format (model_a, model_b, winner; optional question_id): "
             ".json, .jsonl, .parquet or .csv.")],
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", "-b", help="Bootstrap rounds for the 95% intervals (0 = none).")] = 100,
    anchor: Annotated[str | None, typer.Option(
        help="Model fixed at --anchor-rating (default: mean rating 1000).")] = None,
    anchor_rating: Annotated[float, typer.Option(help="Rating of the anchor model.")] = 1000.0,
    resample: Annotated[str, typer.Option(
        help="Bootstrap unit: 'prompt' (battles of one question_id together) or 'battle'.")] = "prompt",
    ties: Annotated[str, typer.Option(
        help="Ties: 'half' (half a win each), 'drop', or 'davidson' (tie model).")] = "half",
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the leaderboard as JSON rows instead of a table.")] = False,
    csv_path: Annotated[Path | None, typer.Option(
        "--csv", help="Also write the leaderboard to this CSV file.")] = None,
    elo_k: Annotated[float | None, typer.Option(
        "--elo-k", help="Add an online-Elo column with this K factor (table only), for comparison.")] = None,
) -> None:
    """Print the Bradley-Terry leaderboard of a battle log (help text: ``RATINGS_HELP``)."""
    from ..rating.battlelog import read_battle_log
    from ..rating.bt import RateOptions, rate
    from ..rating.elo import online_elo_table

    with _user_errors():
        table, report = read_battle_log(battles)
        for line in report.lines():
            Console(stderr=True).print(line, highlight=False, soft_wrap=True)
        options = RateOptions(anchor=anchor, anchor_rating=anchor_rating, bootstrap=bootstrap, resample=resample,
                              ties=ties, seed=seed)
        result = rate(table, options)
        ratings = result.to_ratings()
        if csv_path is not None:
            write_leaderboard_csv(ratings, csv_path)
        if as_json:
            typer.echo(json.dumps(ratings_to_json(ratings), indent=2))
        else:
            extra = {f"online Elo k={elo_k:g}": online_elo_table(table, k=elo_k)} if elo_k else None
            title = f"Bradley-Terry ratings of {battles.name} ({report.rated} battles)"
            print_leaderboard(ratings, title=title, extra=extra)


def compare_command(
    board_a: Annotated[str, typer.Argument(
        help="The leaderboard to check: a CSV/JSON file or an arena workspace directory.")],
    board_b: Annotated[str, typer.Argument(
        help="The reference leaderboard (e.g. human Chatbot Arena, arena-hard, AlpacaEval CSV).")],
    model_col: Annotated[str | None, typer.Option(
        help="Model-name column of BOARD_B (default: guessed, else 'model'); BOARD_A is always guessed.")] = None,
    score_col: Annotated[str | None, typer.Option(
        help="Score column of BOARD_B, higher is better (default: guessed, else 'score').")] = None,
    lower_col: Annotated[str | None, typer.Option(
        help="Lower bound of BOARD_B's 95% interval (default: guessed, else 'lower').")] = None,
    upper_col: Annotated[str | None, typer.Option(
        help="Upper bound of BOARD_B's 95% interval (default: guessed, else 'upper').")] = None,
    match: Annotated[str, typer.Option(
        help="Model-name matching: 'loose' (case, '_' vs '-' ignored) or 'exact'.")] = "loose",
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Print the consistency of two leaderboards (help text: ``COMPARE_HELP``)."""
    from ..rating.boards import read_board
    from ..rating.consistency import compare_boards

    with _user_errors():
        # The column options describe the reference, usually a foreign CSV; BOARD_A is most often our own export.
        a = read_board(board_a)
        b = read_board(board_b, model_col=model_col, score_col=score_col, lower_col=lower_col, upper_col=upper_col)
        result = compare_boards(a.entries, b.entries, match=match)
        if result.n_models < 2:
            raise ArenaError(
                f"only {result.n_models} model(s) are on both boards; nothing to compare "
                "(check the names, or try --match loose)"
            )
        if as_json:
            out = result.to_dict()
            out.update(board_a=a.source, board_b=b.source, layout_a=a.layout, layout_b=b.layout)
            typer.echo(json.dumps(out, indent=2))
            return
        console = Console()
        names = f"{Path(a.source).name} vs reference {Path(b.source).name}"
        t = Table(title=f"{names}: {result.n_models} models on both")
        t.add_column("metric")
        t.add_column("value", justify="right")
        t.add_column("note")
        t.add_row("Spearman", _fmt(result.spearman, 3), "rank correlation of the scores")
        t.add_row("Kendall tau-b", _fmt(result.kendall, 3), "")
        t.add_row("agreement (95% CI)", _fmt(result.agreement, 3),
                  f"over {result.agreement_pairs} pairs the reference separates")
        t.add_row("separability (95% CI)", _fmt(result.separability, 3),
                  f"of BOARD_A; reference: {_fmt(result.separability_reference, 3)}")
        t.add_row("pair-rank Brier", _fmt(result.brier, 4), "0 is perfect, 0.25 a coin")
        t.add_row("average consistency", _fmt(result.average, 3),
                  "WizardArena: mean of Spearman, agreement, separability")
        console.print(t)
        if result.only_in_candidate or result.only_in_reference:
            console.print(
                f"not on both boards: {len(result.only_in_candidate)} only in BOARD_A, "
                f"{len(result.only_in_reference)} only in BOARD_B",
                highlight=False,
            )


def diff_board(workspace: Path, model: str, other: str, json_out: bool, judge: str | None = None) -> None:
    """Print ``arena leaderboard WS --diff MODEL OTHER``: the paired comparison of two models of a workspace.

    The rating difference with its CI from shared resamples (the workspace's own rating settings: an arena
    run's, else a flywheel's), the share of resamples rating MODEL higher, MODEL's battles against OTHER, and
    exact answers gained and lost per category where the prompts carry checker references.
    """
    from ..config import RatingConfig
    from ..rating.bt import RateOptions, rate
    from ..rating.counts import BattleTable
    from ..rating.paired import model_diff
    from ..store import DEFAULT_SET, Store
    from .consoles import stdout_console
    from .peers import _pick_judge

    with _user_errors(), Store(workspace, readonly=True) as store:
        name = _pick_judge(store, judge, list(store.info()["judges"]))
        battles = store.get_battles(name)
        if not battles:
            raise ArenaError(f"{workspace} has no battles of judge {name!r} on its test set: run `arena battle` "
                             "(or `arena run`, `arena flywheel`) first")
        saved = store.get_meta("config") or store.get_meta("flywheel_config")
        prompts = store.get_prompts(DEFAULT_SET)
        answers = store.get_answers(set_name=DEFAULT_SET)
        try:
            r = RatingConfig.model_validate((saved or {}).get("ratings", {}) if isinstance(saved, dict) else {})
        except ValueError as err:
            raise ArenaError(f"the rating settings saved in {workspace} do not validate ({err}); rerun the run to "
                             "refresh them") from None
        fit = rate(BattleTable.from_battles(battles), RateOptions(**r.model_dump()))
        diff = model_diff(fit, battles, model, other, prompts, answers)
    if json_out:
        typer.echo(json.dumps({"judge": name, **diff.as_dict()}, indent=2))
        return
    from rich.markup import escape

    d, h = diff.delta, diff.head
    t = Table(title=f"A = {escape(model)} against B = {escape(other)}: judge {escape(name)}, {len(battles)} battles, "
              f"{r.bootstrap} bootstrap rounds resampling {r.resample}s", title_justify="left")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("note")
    ci = "-" if d.ci_low is None or d.ci_high is None else f"[{d.ci_low:+.1f}, {d.ci_high:+.1f}]"
    t.add_row("rating difference", f"{d.rating:+.1f}", "A minus B, point ratings")
    t.add_row("95% CI (paired)", ci, f"of the difference in each of {d.rounds} rounds rating both on one resample")
    t.add_row("P(A > B)", _fmt(d.p_better, 3), "share of those rounds rating A higher")
    t.add_row("A vs B battles", f"{h.wins} won, {h.losses} lost, {h.ties} tied",
              f"on {h.shared_prompts} prompts both played")
    e, eo = diff.exact, diff.exact_other
    if e is not None:
        t.add_row("exact answers", f"{e.n}/{e.of} vs {eo.n}/{eo.of}" if eo is not None else f"{e.n}/{e.of}",
                  "checker score 10")
        if e.gained is not None:
            t.add_row("gained / lost", f"+{e.gained} -{e.lost}", "right in A and wrong in B / the reverse")
    console = stdout_console()
    console.print(t)
    if e is not None and e.gained is not None and e.per_category:
        c = Table(title="exact answers per category (A, B; gained and lost by A)", title_justify="left")
        for col in ("category", "prompts", "A", "B", "gained", "lost"):
            c.add_column(col, justify="left" if col == "category" else "right")
        for cat, x in e.per_category.items():
            y = eo.per_category.get(cat) if eo is not None else None
            c.add_row(escape(cat), str(x.of), str(x.n), "-" if y is None else str(y.n), str(x.gained), str(x.lost))
        console.print(c)
