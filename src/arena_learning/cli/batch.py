"""``arena batch export`` and ``arena batch import``: a stage's endpoint calls as an offline batch file, and back.

The work is in ``offline_batch``; the counts are printed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .. import pipeline
from ..config import RunConfig, load_config_file
from ..extras import require_for
from ..store import Store
from .consoles import stderr_console
from .errors import user_errors

err_console = stderr_console()

BATCH_HELP = ("Offline batch files for `vllm run-batch` or any runner of OpenAI's batch format: export a stage's "
              "endpoint calls, run them elsewhere, import the replies into the ledger.")

EXPORT_HELP = (
    "Write the calls STAGE would still send to the config's endpoint models and judges (engine: openai) as Batch "
    "API request lines (custom_id: the call's ledger key; calls the ledger holds are left out), and record them in "
    "the workspace for `arena batch import`. The stage runs on a scratch copy of the workspace: nothing is sent, "
    "the workspace keeps only the record. A second turn, or an adaptive schedule's next round, depends on the "
    "replies: export again after each import.")

IMPORT_HELP = (
    "Read a batch output file (OpenAI's format, as `vllm run-batch` writes it) into the workspace's ledger: each "
    "reply under the ledger key of the call exported, an error line as a failed call (asked again next time). A "
    "line that cannot be read, or that answers no exported call, is reported with its line number and custom_id "
    "and skipped (exit code 1); every other line is kept. Then run the stage: its calls come from the ledger.")


def register(app: typer.Typer) -> None:
    """Add ``arena batch export`` and ``arena batch import`` to ``app``."""
    batch_app = typer.Typer(help=BATCH_HELP, no_args_is_help=True)
    batch_app.command("export", help=EXPORT_HELP)(export_command)
    batch_app.command("import", help=IMPORT_HELP)(import_command)
    app.add_typer(batch_app, name="batch")


@user_errors
def export_command(
    config: Annotated[Path, typer.Argument(help="YAML run config")],
    stage: Annotated[str, typer.Option("--stage", help="answers or battles")],
    out: Annotated[Path, typer.Option("--out", help="the request file to write (JSONL)")],
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", help="workspace directory (default: the "
                                                   "config's, or workspaces/NAME)")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", help="only this model's calls (repeatable): a "
                                                    "runner that serves one model takes one file each")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config field (repeatable)")] = None,
) -> None:
    from ..errors import ArenaError
    from ..offline_batch import export_requests

    if stage not in ("answers", "battles"):
        raise ArenaError(f"--stage {stage!r}: give answers or battles")
    cfg = load_config_file(config, RunConfig, set_)
    require_for(cfg, f"{config}")
    with Store(pipeline.workspace_for(cfg, workspace)) as store:
        report = export_requests(cfg, store, stage, out, model or ())  # type: ignore[arg-type]  # checked above
        where = store.root
    total = sum(report.calls.values())
    for name, n in report.calls.items():
        err_console.print(escape(f"{name}: {n} calls"), highlight=False)
    for name, n in report.skipped.items():
        err_console.print("[yellow]" + escape(f"{name}: {n} calls left out (not an endpoint model: `arena "
                                              f"{'answer' if stage == 'answers' else 'battle'}` runs them)"))
    if report.answers_missing:
        err_console.print("[yellow]" + escape(f"{report.answers_missing} answer calls are not in the ledger yet: the "
                                              f"battles that need their answers are left out (export --stage "
                                              f"answers and import it, or run `arena answer`, first)"))
    if total:
        err_console.print(escape(f"{total} requests written to {out}; run them (e.g. `vllm run-batch -i {out} -o "
                                 f"results.jsonl --model MODEL`), then `arena batch import results.jsonl -w {where}`"),
                          highlight=False)
    else:
        err_console.print(escape(f"nothing to export: the ledger of {where} holds every call of the {stage} stage "
                                 f"(an empty {out} was written)"), highlight=False)


@user_errors
def import_command(
    results: Annotated[Path, typer.Argument(help="the batch output file (JSONL)")],
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="the workspace the requests were exported "
                                            "from")],
) -> None:
    from ..offline_batch import import_results

    with Store(workspace, create=False) as store:
        report = import_results(store, results)
    err_console.print(escape(f"{report.ok} replies kept, {report.failed} failed calls (asked again by the next run "
                             f"or export) from {results}"), highlight=False)
    for error in report.errors:
        err_console.print("[yellow]" + escape(error))
    for bad in report.bad:
        err_console.print("[yellow]" + escape(f"{results}:{bad.number}: custom_id {bad.custom_id or '(none)'}: "
                                              f"{bad.why}; skipped"))
    for line in report.unknown[:20]:
        err_console.print("[yellow]" + escape(f"{results}:{line.number}: custom_id {line.custom_id}: no exported "
                                              f"call of {workspace} has this key; skipped"))
    if len(report.unknown) > 20:
        err_console.print(f"[yellow]... and {len(report.unknown) - 20} more replies to calls not exported from here")
    if report.bad or report.unknown:
        raise typer.Exit(1)
