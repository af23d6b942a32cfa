"""CLI commands of the rating stage: ``arena ratings`` and ``arena compare``.

Thin: read the input, call the stage function, print a table or JSON. Errors the user can
fix are ``ArenaError``: printed on stderr, exit code 2. Warnings about the data (no exact
ratings, skipped rows) go to stderr, so ``--json`` output stays machine-readable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import ArenaError
from ..rating.export import ratings_to_json, write_leaderboard_csv
from .consoles import stderr_console, stdout_console
from .errors import reporting_errors as _user_errors
from .tables import fmt as _fmt
from .tables import print_leaderboard

if TYPE_CHECKING:
    from ..config import RatingConfig
    from ..rating.boards import Board
    from ..rating.consistency import Consistency
    from ..rating.paired import ModelDiff

__all__ = ["compare_command", "ratings_command", "ratings_to_json", "register", "workspace_diff",
           "write_leaderboard_csv"]


RATINGS_HELP = (
    "Rate the battles of a battle log (e.g. a public Chatbot Arena dump) with Bradley-Terry and bootstrap "
    "intervals.\n\n"
    "Prints rating, 95% interval, rank and rank with CI (1 + number of models confidently better) per model. "
    "Rows with an unknown winner or a missing model are counted on stderr, not rated."
)
COMPARE_HELP = (
    "Compare leaderboards with a reference leaderboard over the models on both: `arena compare BOARD_A REFERENCE`, "
    "or several boards, one row each: `arena compare B1 B2 B3 REFERENCE` (or `--reference REF B1 B2 B3`).\n\n"
    "Prints Spearman and Kendall correlation, agreement with 95% CI, separability with 95% CI, the pair-rank "
    "Brier score and WizardArena's average consistency (the mean of Spearman, agreement and separability), "
    "then how the model names were matched. A board is a CSV/JSON file (known layouts: arena-hard, AlpacaEval, "
    "Chatbot Arena's table, `arena ratings --csv`, the JSON of `arena leaderboard --json` and `arena scores "
    "--json`; gzipped too) or a workspace (its run's board, or with --judge a judge's battles rated with "
    "Bradley-Terry). --model-col, --score-col, --lower-col, --upper-col, --se-col name the reference's columns; "
    "--board-model-col and the other --board-* options those of the boards compared with it."
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
            stderr_console().print(line, highlight=False, soft_wrap=True)
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
    boards: Annotated[list[str], typer.Argument(
        help="Leaderboards: CSV/JSON files (gzipped or not; the JSON of `arena leaderboard --json` or "
             "`arena scores --json`) or workspaces. The last is the reference unless --reference names it.",
        metavar="BOARD_A [BOARD ...] REFERENCE")],
    reference: Annotated[str | None, typer.Option(
        "--reference", help="The reference board; then every BOARD is compared with it, one row each.")] = None,
    judge: Annotated[str | None, typer.Option(
        help="A workspace's judge whose battles to rate (default: the run's board, or the only judge).")] = None,
    model_col: Annotated[str | None, typer.Option(
        help="Model-name column of the reference (default: guessed, else 'model').")] = None,
    score_col: Annotated[str | None, typer.Option(
        help="Score column of the reference, higher is better (default: guessed, else 'score').")] = None,
    lower_col: Annotated[str | None, typer.Option(
        help="Lower bound of the reference's 95% interval (default: guessed, else 'lower').")] = None,
    upper_col: Annotated[str | None, typer.Option(
        help="Upper bound of the reference's 95% interval (default: guessed, else 'upper').")] = None,
    se_col: Annotated[str | None, typer.Option(
        help="Standard-error column of the reference: the 95% interval is +-1.96 SE (default: guessed).")] = None,
    cand_model_col: Annotated[str | None, typer.Option(
        "--board-model-col", help="Model-name column of the boards compared with the reference.")] = None,
    cand_score_col: Annotated[str | None, typer.Option(
        "--board-score-col", help="Score column of the boards compared with the reference.")] = None,
    cand_lower_col: Annotated[str | None, typer.Option(
        "--board-lower-col", help="Lower-bound column of the boards compared with the reference.")] = None,
    cand_upper_col: Annotated[str | None, typer.Option(
        "--board-upper-col", help="Upper-bound column of the boards compared with the reference.")] = None,
    cand_se_col: Annotated[str | None, typer.Option(
        "--board-se-col", help="Standard-error column of the boards compared with the reference.")] = None,
    aliases: Annotated[Path | None, typer.Option(
        "--aliases", help="CSV of two columns (no header needed): a model's name on one board and its name on "
                          "the other, either way round.")] = None,
    match: Annotated[str, typer.Option(
        help="Model-name matching: 'loose' (organisation prefix, case, separators, -hf ignored; versions "
             "compared) or 'exact'.")] = "loose",
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Print the consistency of leaderboards with a reference (help text: ``COMPARE_HELP``)."""
    from ..rating.consistency import compare_boards

    with _user_errors():
        if reference is None:
            if len(boards) < 2:
                raise ArenaError("give at least two leaderboards (the last is the reference), or --reference REF")
            *cands, reference = boards
        else:
            cands = boards
        ref = _read_any_board(reference, judge, "--model-col, --score-col, --lower-col, --upper-col, "
                              "--se-col", model_col=model_col, score_col=score_col, lower_col=lower_col,
                              upper_col=upper_col, se_col=se_col)
        table = _read_aliases(aliases) if aliases is not None else None
        _say_manifest_differences([*cands, reference])
        results = []
        for source in cands:
            board = _read_any_board(source, judge, "--board-model-col, --board-score-col, "
                                    "--board-lower-col, --board-upper-col, --board-se-col", model_col=cand_model_col,
                                    score_col=cand_score_col, lower_col=cand_lower_col, upper_col=cand_upper_col,
                                    se_col=cand_se_col)
            result = compare_boards(board.entries, ref.entries, match=match, aliases=table)
            if result.n_models < 2:
                raise ArenaError(
                    f"only {result.n_models} model(s) are on both boards ({board.source} and the reference "
                    f"{ref.source}); nothing to compare (check the names, give --aliases FILE, or try --match loose)"
                )
            results.append((board, result))
        if as_json:
            rows = []
            for board, result in results:
                out = result.to_dict()
                out.update(board_a=board.source, board_b=ref.source, layout_a=board.layout, layout_b=ref.layout,
                           notes_a=board.notes, notes_b=ref.notes)
                rows.append(out)
            typer.echo(json.dumps(rows[0] if len(rows) == 1 else {"reference": ref.source, "boards": rows}, indent=2))
            return
        _print_comparison(results, ref)


def _say_manifest_differences(sources: list[str]) -> None:
    """Say first when a workspace compared with a workspace reference has a board of another judge or test set."""
    from ..arena.manifest import manifest_differences
    from ..pipeline import workspace_manifest
    from ..store import Store

    found = []
    for source in sources:
        path = Path(source)
        if path.is_dir() and (path / Store.FILE).is_file():
            m = workspace_manifest(path)
            if m is not None:
                found.append((source, m))

    if len(found) < 2 or found[-1][0] != sources[-1]:
        return  # the reference is no workspace: nothing to hold the others' manifests against
    ref, ref_manifest = found[-1]
    for source, m in found[:-1]:
        for what in manifest_differences(m, ref_manifest):
            stderr_console().print(f"[bold yellow]note:[/] {escape(source)} and the reference {escape(ref)}: "
                                   f"{escape(what)}; their figures are not like for like", highlight=False,
                                   soft_wrap=True)


def _read_any_board(source: str, judge: str | None, options: str, **cols: str | None) -> Board:
    """Return the board at ``source``: a workspace by its judge's battles (or its run), else a file."""
    from ..rating.boards import Board, read_board
    from ..store import Store

    path = Path(source)
    if path.is_dir() and (path / Store.FILE).is_file():
        with Store(path, readonly=True) as store:
            has_run = store.get_meta("config") is not None
        if judge is not None or not has_run:
            from .peers import judge_ratings

            name, ratings = judge_ratings(path, judge)
            return Board(str(path), f"workspace (judge {name})", ratings)
    return read_board(source, options=options, **cols)


def _read_aliases(path: Path) -> dict[str, str]:
    """Return the name pairs of an aliases CSV: two columns, a header row optional (its names are kept as a pair)."""
    import csv

    if not path.is_file():
        raise ArenaError(f"aliases file not found: {path} (a CSV of two columns: name on one board, on the other)")
    out: dict[str, str] = {}
    with path.open(encoding="utf-8-sig", newline="") as fh:
        for n, row in enumerate(csv.reader(fh), 1):
            cells = [c.strip() for c in row if c.strip()]
            if not cells or cells[0].startswith("#"):
                continue
            if len(cells) != 2:
                raise ArenaError(f"{path}:{n}: an alias row has two names (one per board), not {len(cells)}")
            out[cells[0]] = cells[1]
    return out


def _print_comparison(results: list[tuple[Board, Consistency]], ref: Board) -> None:
    console = stdout_console()
    err = stderr_console()
    if len(results) == 1:
        board, result = results[0]
        names = f"{Path(board.source).name} vs reference {Path(ref.source).name}"
        t = Table(title=escape(f"{names}: {result.n_models} models on both"))
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
    else:
        t = Table(title=escape(f"each board against the reference {Path(ref.source).name} (WizardArena's Table 2)"))
        for col in ("board", "models", "Spearman", "Kendall", "agreement", "separability", "Brier", "average"):
            t.add_column(col, justify="left" if col == "board" else "right")
        for board, r in results:
            t.add_row(escape(Path(board.source).name), str(r.n_models), _fmt(r.spearman, 3), _fmt(r.kendall, 3),
                      _fmt(r.agreement, 3), _fmt(r.separability, 3), _fmt(r.brier, 4), _fmt(r.average, 3))
        console.print(t)
        console.print("average: the mean of Spearman, agreement and separability (WizardArena's average consistency)",
                      highlight=False)
    for note in ref.notes:
        err.print(escape(f"reference {ref.source}: {note}"), highlight=False, soft_wrap=True)
    for board, result in results:
        label = Path(board.source).name
        for note in board.notes:
            err.print(escape(f"{board.source}: {note}"), highlight=False, soft_wrap=True)
        for which, missing in ((f"board {label}", result.no_interval_candidate),
                               (f"the reference {Path(ref.source).name}", result.no_interval_reference)):
            if missing:
                err.print(escape(f"{which} has no intervals for {missing} of {result.n_models} models: "
                                 "agreement and separability need them (give bounds or a standard-error column)"),
                          highlight=False, soft_wrap=True)
        _print_names(console, label, result)


def _print_names(console: Console, label: str, result: Consistency) -> None:
    """Print how the names met: every match that is not exact, the names refused, the names on one board only."""
    exact = sum(1 for _, _, how in result.matches if how == "exact")
    other = [m for m in result.matches if m[2] != "exact"]
    console.print(escape(f"names of {label}: {exact} matched exactly, {len(other)} otherwise, "
                         f"{len(result.only_in_candidate)} only on this board, {len(result.only_in_reference)} only "
                         "on the reference"), highlight=False)
    if other or result.refused:
        t = Table(title=escape(f"names of {label} matched not exactly (or refused)"), title_justify="left")
        for col in ("board", "reference", "how"):
            t.add_column(col)
        for c, r, how in other:
            t.add_row(escape(c), escape(r), escape(how))
        for c, r, why in result.refused:
            t.add_row(escape(c), escape(r), escape(f"not matched: {why}"))
        console.print(t)
    if result.only_in_candidate:
        console.print(escape(f"only on {label}: {', '.join(result.only_in_candidate)}"), highlight=False)
    if result.only_in_reference:
        console.print(escape(f"only on the reference: {', '.join(result.only_in_reference)}"), highlight=False)


def workspace_diff(workspace: Path, model: str, other: str,
                   judge: str | None = None) -> tuple[str, ModelDiff, int, RatingConfig]:
    """Return (judge, the paired comparison of MODEL with OTHER, battles rated, rating settings) from a workspace's
    test battles.

    The rating uses the workspace's own rating settings (an arena run's, else a flywheel's); exact answers
    gained and lost per category where the prompts carry checker references.
    """
    from ..config import RatingConfig
    from ..rating.bt import RateOptions, rate
    from ..rating.counts import BattleTable
    from ..rating.paired import model_diff
    from ..store import DEFAULT_SET, Store
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
        return name, model_diff(fit, battles, model, other, prompts, answers), len(battles), r


def diff_board(workspace: Path, model: str, other: str, json_out: bool, judge: str | None = None) -> None:
    """Print ``arena leaderboard WS --diff MODEL OTHER``: the paired comparison of two models of a workspace.

    The rating difference with its CI from shared resamples (``workspace_diff``), the share of resamples rating
    MODEL higher, MODEL's battles against OTHER, and exact answers gained and lost per category.
    """

    name, diff, n_battles, r = workspace_diff(workspace, model, other, judge)
    if json_out:
        typer.echo(json.dumps({"judge": name, **diff.as_dict()}, indent=2))
        return
    from rich.markup import escape

    d, h = diff.delta, diff.head
    t = Table(title=f"A = {escape(model)} against B = {escape(other)}: judge {escape(name)}, {n_battles} battles, "
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
