"""CLI command ``arena judge-audit``: the bias figures of a workspace's judges.

Thin: read the judgments (and answers, and human labels) from the workspace, call the
audit functions, print a table (or JSON on stdout). Errors the user can fix are
``ArenaError``: printed on stderr, exit code 2. ``audit_workspace`` is the same data for
reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from ..arena.audit import Agreement, JudgeAudit, wilson_interval
from .consoles import stderr_console, stdout_console
from .errors import reporting_errors

HELP = (
    "Audit the judges of a workspace: position bias (first-shown answer's win rate), order consistency "
    "(same winner in both orders), length bias (longer answer's win rate), tie rate, parse failures and flags.\n\n"
    "--compare-judge adds each judge's agreement with another judge over the battles both judged; --human adds "
    "agreement with human labels (CSV or JSONL with prompt_id, model_a, model_b, winner); without --human, the "
    "workspace's votes (`arena vote`) are the labels, with each voter's figures and the agreement between voters."
)


def register(app: typer.Typer) -> None:
    """Add the ``judge-audit`` command to ``app``."""
    app.command("judge-audit", help=HELP)(judge_audit_command)


def judge_audit_command(
    workspace: Annotated[Path, typer.Argument(help="Workspace directory of a run.")],
    judge: Annotated[
        str | None, typer.Option("--judge", help="Audit this judge only (default: every judge).")
    ] = None,
    compare_judge: Annotated[
        str | None, typer.Option("--compare-judge", help="Also show agreement with this judge over common battles.")
    ] = None,
    human: Annotated[
        Path | None, typer.Option("--human", help="Human labels (CSV/JSONL: prompt_id, model_a, model_b, winner).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the audit as one JSON object.")] = False,
) -> None:
    """Print the judge audit of a workspace (help text: ``HELP``)."""
    from ..people.workspace import audit_with_votes  # numpy: only when the command runs

    with reporting_errors():
        result = audit_with_votes(workspace, judge=judge, compare_judge=compare_judge, human=human)
    labels = result.human_labels
    err = stderr_console()
    if labels is not None and labels.bad:
        err.print(f"[yellow]warning:[/yellow] {labels.bad} of {labels.rows} label rows left out:", highlight=False)
        for line in labels.errors:
            err.print(f"  {line}", highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    out = stdout_console()
    out.print(audit_table(result.audits))
    agreements = (
        ("agreement between judges", result.judge_agreement),
        ("agreement with human labels", result.human_agreement),
    )
    for title, rows in agreements:
        if rows:
            out.print(agreement_table(rows, title))
    if result.voters:
        from .votes import disagreement_table, voter_table

        for cat, rows in result.human_by_category.items():
            out.print(agreement_table(rows, f"agreement with the votes on category {cat}"))
        if result.human_disagreements:
            out.print(disagreement_table(result.human_disagreements))
        out.print(voter_table(result.voters))
        if result.voter_agreement is not None and result.voter_agreement.n:
            out.print(agreement_table([result.voter_agreement], "agreement between voters on the same battle"))


def audit_table(audits: list[JudgeAudit]) -> Table:
    """Return the rich table of judge audits: one row per figure, one column per judge.

    Figures down, judges across, so a few judges fit an 80-column terminal.
    """
    t = Table(title="judge audit", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("figure", no_wrap=True)
    for a in audits:
        t.add_column(a.judge, justify="right", overflow="fold")
    rows = [
        ("games", lambda a: str(a.games)),
        ("parse failures", lambda a: _pct(a.parse_failure_rate, a.failed)),
        ("ties", lambda a: _pct(a.tie_rate, a.ties)),
        ("first shown wins (0.5 = no bias)", lambda a: _pct(a.position_bias, a.decisive, of=True)),
        ("  95% CI", lambda a: _ci(a.position_bias_ci)),
        ("same verdict in both orders", lambda a: _pct(a.order_consistency, a.pairs_both_orders, of=True)),
        ("  others favour 1st / 2nd", lambda a: f"{a.favour_first} / {a.favour_second}"),
        ("longer answer wins", lambda a: _pct(a.length_bias, a.length_games, of=True)),
        ("  95% CI", lambda a: _ci(a.length_bias_ci)),
        ("injection flags", lambda a: str(a.injection_flags)),
        ("flags", lambda a: ", ".join(f"{k} {v}" for k, v in a.flags.items()) or "-"),
    ]
    for name, cell in rows:
        t.add_row(name, *(cell(a) for a in audits))
    return t


def agreement_table(rows: list[Agreement], title: str) -> Table:
    """Return the rich table of agreements: one row per figure, one column per pair of sources."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("figure", no_wrap=True)
    for a in rows:
        t.add_column(f"{a.name_x} vs {a.name_y}", justify="right", overflow="fold")
    figures = [
        ("battles compared", lambda a: str(a.n)),
        ("same outcome (ties count)", lambda a: _pct(a.agreement, a.n, of=True)),
        ("  95% CI", lambda a: _ci(wilson_interval(a.agree, a.n))),
        ("same winner (no ties)", lambda a: _pct(a.agreement_without_ties, a.n_without_ties, of=True)),
        ("Cohen's kappa", lambda a: "-" if a.kappa is None else f"{a.kappa:.3f}"),
        ("only the judge", lambda a: str(a.only_x)),
        ("only the other", lambda a: str(a.only_y)),
    ]
    for name, cell in figures:
        t.add_row(name, *(cell(a) for a in rows))
    return t


def _pct(share: float | None, count: int, *, of: bool = False) -> str:
    """Format a share with its count: "61.2% of 120" (of=True) or "12.0% (6)"."""
    if share is None:
        return "-"
    return f"{100 * share:.1f}% of {count}" if of else f"{100 * share:.1f}% ({count})"


def _ci(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"{100 * ci[0]:.0f}-{100 * ci[1]:.0f}%"
