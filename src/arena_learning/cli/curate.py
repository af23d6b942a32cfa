"""``arena ingest``, ``arena testset build`` and ``arena pool build``: the curation commands.

The runs themselves are in ``curate.runs``; their counts are printed here as tables.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import JustifyMethod
from rich.table import Table

from ..config import load_config_file
from ..curate import INGESTED
from ..errors import ArenaError
from ..extras import require_for
from ..progress import tracking
from ..store import Store
from .consoles import stderr_console, stdout_console
from .errors import user_errors as _user_errors

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..curate.filters import Step
    from ..curate.ingest import IngestReport
    from ..curate.settings import SourceFormat

# The curation modules (their config classes, filters, progress tables) are imported by the commands that run
# them: every other command (`arena battle` among them) starts without them.

console = stdout_console()
err_console = stderr_console()


def ingest_table(report: IngestReport) -> Table:
    """Return the per-source counts of an ingest as a table."""
    from ..curate.runs import BAD_KINDS

    kinds = ["read", "ingested", "already_present", "id_renamed", *BAD_KINDS]
    shown = [k for k in kinds if any(c.get(k) for c in report.per_source.values())] or ["read", "ingested"]
    table = Table(title="ingest", title_justify="left")
    table.add_column("source")
    for k in shown:
        table.add_column(k.replace("_", " "), justify="right")
    for source, counts in report.per_source.items():
        table.add_row(source, *(str(counts.get(k, 0)) for k in shown))
    return table


def print_problems(report: IngestReport, limit: int = 10) -> None:
    """Print the first skipped inputs with their file:line."""
    from ..curate.runs import BAD_KINDS

    if not report.problems:
        return
    total = sum(report.counts.get(k, 0) for k in BAD_KINDS)
    err_console.print(f"[yellow]{total} bad inputs skipped (use --strict to stop at the first):", highlight=False)
    for problem in report.problems[:limit]:
        err_console.print(f"  {problem}", highlight=False, soft_wrap=True)
    if total > limit:
        err_console.print(f"  ... and {total - limit} more", highlight=False)


def steps_table(steps: Sequence[Step], title: str) -> Table:
    """Return the counts per step: in, out, dropped by reason, notes."""
    table = Table(title=title, title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("step", "left"), ("in", "right"), ("out", "right"), ("dropped", "left"), ("notes", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for s in steps:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(s.dropped.items())) or "-"
        notes = ", ".join(f"{k} {v}" for k, v in s.notes.items()) or ""
        table.add_row(s.name, str(s.n_in), str(s.n_out), dropped, notes)
    return table


def per_cluster_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    """Return a table of per-cluster counts (one row per dict, columns in the dicts' order)."""
    table = Table(title=title, title_justify="left")
    if not rows:
        return table
    for col in rows[0]:
        if col == "example":
            table.add_column(col, no_wrap=True, overflow="ellipsis", max_width=48)
        else:
            justify: JustifyMethod = "left" if col == "cluster" else "right"
            table.add_column(col, justify=justify, no_wrap=True, min_width=len(col))
    for r in rows:
        table.add_row(*("-" if v is None else str(v) for v in r.values()))
    return table

WorkspaceOpt = Annotated[
    Path | None, typer.Option("--workspace", "-w", help="workspace directory (default: the config's 'workspace')")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a config field, e.g. --set diverse.n_clusters=20 (repeatable)"),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars")]


def ingest_command(
    sources: Annotated[
        list[Path],
        typer.Argument(help="files (.json .jsonl .parquet .csv) or folders saved with datasets' save_to_disk"),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="workspace directory to ingest into (created if missing)")],
    format: Annotated[
        str, typer.Option("--format", "-f", help="record layout: auto, sharegpt, openai, alpaca, mtbench, arenahard")
    ] = "auto",
    name: Annotated[
        str | None, typer.Option("--name", help="source label for every prompt (default: each file's name)")
    ] = None,
    set_name: Annotated[str, typer.Option("--set-name", help="prompt set to ingest into")] = INGESTED,
    strict: Annotated[bool, typer.Option("--strict", help="stop at the first bad line instead of skipping it")] = False,
    replace: Annotated[
        bool, typer.Option("--replace", help="start the set afresh instead of adding to what it holds")
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Read conversations (ShareGPT, OpenAI messages, Alpaca, MT-Bench, arena-hard) into a workspace.

    Multi-turn conversations keep their turns; assistant turns are kept as reference
    answers. Bad lines are reported as file:line, skipped and counted (--strict makes
    them fatal); what was ingested before a fatal line is kept. Rerunning is safe:
    records already in the set are recognised by id and content.
    """
    from ..curate.runs import run_ingest, set_path
    from ..curate.settings import SourceSpec

    allowed: tuple[SourceFormat, ...] = ("auto", "sharegpt", "openai", "alpaca", "mtbench", "arenahard")
    if format not in allowed:
        raise ArenaError(f"--format {format!r} is not one of: {', '.join(allowed)}")
    specs = [SourceSpec(path=str(p), format=format, name=name) for p in sources]
    with Store(out) as store:
        with tracking(not quiet) as track:
            report = run_ingest(store, specs, set_name, strict=strict, replace=replace, track=track)
        console.print(ingest_table(report))
        print_problems(report)
        console.print(f"set {set_name!r}: {len(report.prompts)} prompts in {store.root} ({set_path(store, set_name)})")


def testset_build_command(
    config: Annotated[Path, typer.Argument(help="YAML test-set config (see examples/testset.yaml)")],
    workspace: WorkspaceOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Build the test set: clean, embed and cluster (diverse half), judge difficulty (hard half), mix.

    Writes the sets testset/clean, testset/diverse, testset/hard and testset/mix to the
    workspace (and JSONL copies under WORKSPACE/sets/), then prints the counts per step
    and per cluster.
    """
    from ..curate.runs import run_testset
    from ..curate.settings import TestsetConfig

    cfg = load_config_file(config, TestsetConfig, set_)
    require_for(cfg, f"{config}", {"curate": "building a test set"})
    root, result = run_testset(cfg, workspace, progress=not quiet, on_skipped=print_problems)
    console.print(steps_table(result.steps, "test set: counts per step"))
    console.print(per_cluster_table(result.per_cluster, "test set: per cluster"))
    console.print(
        f"diverse {len(result.diverse)}, hard {len(result.hard)}, mix {len(result.mix)} prompts "
        f"in {root} (sets testset/*; JSONL under {root / 'sets' / 'testset'})"
    )


def pool_build_command(
    config: Annotated[Path, typer.Argument(help="YAML pool config (see examples/pool.yaml)")],
    workspace: WorkspaceOpt = None,
    set_: SetOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Build the training pool: clean, dedupe, decontaminate against the test sets, cut slices D0..DN.

    Slices are stratified by cluster and seeded; D0 is the initial SFT data. Writes
    pool/clean and pool/D0.. to the workspace (JSONL copies under WORKSPACE/sets/pool/).
    """
    from ..curate.runs import run_pool
    from ..curate.settings import PoolConfig

    cfg = load_config_file(config, PoolConfig, set_)
    require_for(cfg, f"{config}", {"curate": "building a training pool"})
    root, result = run_pool(cfg, workspace, progress=not quiet, on_skipped=print_problems)
    console.print(steps_table(result.steps, "pool: counts per step"))
    console.print(per_cluster_table(result.per_cluster, "pool: slices per cluster"))
    sizes = ", ".join(f"D{i} {len(s)}" for i, s in enumerate(result.slices))
    console.print(f"pool {len(result.pool)} prompts: {sizes} in {root}")


def _help(doc: str | None) -> str:
    """Return a docstring as --help text: paragraphs unwrapped (the terminal wraps them again)."""
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def register(app: typer.Typer) -> None:
    """Add ``ingest``, ``testset build`` and ``pool build`` to ``app``."""
    app.command("ingest", help=_help(ingest_command.__doc__))(_user_errors(ingest_command))
    testset_app = typer.Typer(help="Build the arena's test set (diverse + hard).", no_args_is_help=True)
    testset_app.command("build", help=_help(testset_build_command.__doc__))(_user_errors(testset_build_command))
    app.add_typer(testset_app, name="testset")
    pool_app = typer.Typer(help="Build the training pool and its slices D0..DN.", no_args_is_help=True)
    pool_app.command("build", help=_help(pool_build_command.__doc__))(_user_errors(pool_build_command))
    app.add_typer(pool_app, name="pool")
