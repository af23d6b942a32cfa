"""``arena plan CONFIG``: the calls a run or a flywheel will make, what is cached, tokens and cost, before running."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from rich import box
from rich.table import Table

from ..config import RunConfig, load_config_file
from ..errors import ConfigError
from ..store import Store
from .consoles import stdout_console
from .errors import user_errors

if TYPE_CHECKING:
    from ..plan import Plan

wide = stdout_console()

PLAN_HELP = (
    "Print what CONFIG (an arena run, or a flywheel config: detected by its rounds and pool, or --flywheel) will "
    "call before running it: answer calls (prompts x models x turns), judge calls by schedule (both orders, per "
    "turn), how many of them the workspace's ledger already holds ('cached': a rerun costs nothing), tokens "
    "estimated from the prompts (characters / 4; outputs at max_tokens), and the cost from each model's price_in / "
    "price_out (synchronous, and 'batch cost' at its price_batch for engines whose APIs sell batches).\n\n"
    "Minutes: each batched llama.cpp model's calls timed from rates measured on this machine (--measure measures "
    "the config's models first; the rates are kept in the cache's rates.json). For a flywheel, per round and "
    "stage, with the training each stage does. Reads the workspace if it exists; writes nothing there.\n\n"
    "--json prints {kind, tokens, lines: [{stage, step, model, calls, cached, to_send, tokens_in, tokens_out, "
    "cost, cost_batch, seconds, timing, note}], totals (minutes per step), notes}."
)


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to ``app``."""
    app.command("plan", help=PLAN_HELP)(plan_command)


def _is_flywheel(path: Path) -> bool:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False  # load_config_file reports it
    return isinstance(data, dict) and ("rounds" in data or "pool" in data)


@user_errors
def plan_command(
    config: Annotated[Path, typer.Argument(help="YAML run config or flywheel config")],
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", help="workspace whose ledger to check "
                                                      "(default: the config's, or workspaces/NAME)")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config field (repeatable)")] = None,
    flywheel: Annotated[bool, typer.Option("--flywheel", help="read CONFIG as a flywheel config")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
    measure: Annotated[bool, typer.Option("--measure", help="measure the config's llama.cpp models on this "
                                          "machine first (rates for the minutes)")] = False,
) -> None:
    from .. import pipeline
    from ..plan import plan_run

    if not config.is_file():
        raise ConfigError(f"config file not found: {config} (give the path of a YAML run or flywheel config)")
    if flywheel or _is_flywheel(config):
        from ..flywheel.plan import plan_flywheel
        from ..flywheel.settings import FlywheelConfig

        fcfg = load_config_file(config, FlywheelConfig, set_)
        ws = workspace or (Path(fcfg.workspace) if fcfg.workspace else Path("workspaces") / fcfg.name)
        with _open(ws) as store:
            plan = plan_flywheel(fcfg, store, timed=True, measure=measure, say=_say)
    else:
        cfg = load_config_file(config, RunConfig, set_)
        ws = pipeline.workspace_for(cfg, workspace)
        with _open(ws) as store:
            plan = plan_run(cfg, store, timed=True, measure=measure, say=_say)
    if json_out:
        typer.echo(json.dumps(plan.as_json()))
        return
    print_plan(plan, ws)


def _say(text: str) -> None:
    typer.echo(text, err=True)  # stdout carries the plan (--json) alone


class _open:  # lower case: a context manager read like a function
    """The workspace's store, read-only, or None when there is none yet (nothing cached)."""

    def __init__(self, ws: Path):
        self.store = Store(ws, readonly=True) if Store.exists(ws) else None

    def __enter__(self) -> Store | None:
        return self.store

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()


def _n(x: int | None) -> str:
    return "?" if x is None else f"{x:,}"


def _usd(x: float) -> str:
    return f"${x:.4f}" if x else "-"


def _min(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f}"


def print_plan(plan: Plan, ws: Path) -> None:
    """Print the plan's lines and totals (stdout) and what it assumes."""
    t = Table(title=f"plan ({plan.kind}; workspace {ws})", title_justify="left", box=box.SIMPLE_HEAD,
              padding=(0, 1), pad_edge=False)
    for col in ("stage", "step", "model", "calls", "cached", "to send", "tokens in", "tokens out <=", "cost",
                "batch cost", "min"):
        if col in ("stage", "step", "model"):  # long flywheel stage and model names fold, never cut off
            t.add_column(col, justify="left", overflow="fold")
        else:
            t.add_column(col, justify="right", no_wrap=True)
    for x in plan.lines:
        if x.step == "train":
            t.add_row(x.stage, x.step, x.model, "", "", "", "", "", "", "", _min(x.seconds), style="dim")
            continue
        t.add_row(x.stage, x.step, x.model, _n(x.calls), _n(x.cached), _n(x.to_send), f"{x.tokens_in:,}",
                  f"{x.tokens_out:,}", _usd(x.cost), "-" if x.cost_batch is None else _usd(x.cost_batch),
                  _min(x.seconds))
    tot = plan.totals()
    mins = tot["minutes"]
    t.add_row("total", "", "", f"{tot['calls']:,}", f"{tot['cached']:,}", f"{tot['to_send']:,}",
              f"{tot['tokens_in']:,}", f"{tot['tokens_out']:,}", _usd(tot["cost"]), _usd(tot["cost_batch"]),
              f"{mins['total']:.1f}" + ("+" if mins["untimed"] else ""), style="bold")
    wide.print(t)
    from ..plan import TOKEN_METHOD

    steps = ", ".join(f"{k} {v:.1f}" for k, v in mins.items() if k not in ("total", "untimed"))
    minutes = [f"minutes: {mins['total']:.1f} in all ({steps})" + (
        f"; plus what is not timed ({mins['untimed']:,} calls or stages: '?' in the table)" if mins["untimed"] else "")]
    cost = [f"cost: the calls to send at each model's price_in / price_out; batch cost: the same calls through a "
            f"batch API at its price_batch (half, for engines openai and anthropic), '-' where the engine has none: "
            f"${tot['cost']:.4f} synchronous, ${tot['cost_batch']:.4f} in batches"] if tot["cost"] else []
    notes = [f"tokens: {TOKEN_METHOD}", *cost, *minutes, *plan.notes,
             *(f"{x.stage} {x.step} {x.model}: {x.note}" for x in plan.lines if x.note),
             *dict.fromkeys(f"minutes of {x.model}: {x.timing}" for x in plan.lines
                            if x.timing and (x.to_send or x.step == "train"))]
    for line in notes:
        wide.print(line, highlight=False, soft_wrap=True)
