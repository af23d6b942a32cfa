"""CLI commands of the flywheel: ``arena flywheel`` (rounds) and ``arena harvest`` (export training data).

Thin: load the config or the workspace, call the flywheel, print the round table or JSON.
Progress, training logs and notes go to stderr, so ``--json`` output can be piped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..config import load_config_file
from ..errors import ArenaError
from ..extras import require_for
from ..flywheel_state import Delta, RatedModel, RoundRow, SliceRecord, StageRecord
from ..records import ExactAnswers
from ..store import DEFAULT_SET, Store
from .consoles import print_manifest_line, stderr_console, stdout_console
from .errors import user_errors, write_report_or_warn
from .options import ray_overrides

if TYPE_CHECKING:
    from ..flywheel.rounds import FlywheelReport

err_console = stderr_console()
# Result tables are 120 columns wide when stdout is a file or pipe (as the other commands' are).
wide = stdout_console()

FLYWHEEL_HELP = (
    "Run the data flywheel of CONFIG (see examples/flywheel.yaml): each round the target battles the references "
    "on a fresh slice, the battles become SFT / DPO / reward-model data, TRL trains the target, and the new model "
    "is rated on the test set with every earlier round's model and the references.\n\n"
    "A run killed anywhere resumes at the stage it was in (finished stages are not redone; training resumes from "
    "its last checkpoint). --json prints {rounds: [{round, model, rating, ci_low, ci_high, sft_examples, "
    "dpo_pairs, rm_pairs, train_loss, delta_prev, delta_base, delta_best_ref, exact, mean_chars, mean_tokens, "
    "style_rating, ...}], references: [{model, rating, ci_low, ci_high, exact, mean_chars, ...}], stages: [...], "
    "...}; a delta is {vs, rating, ci_low, ci_high, p_better}: the paired rating difference (both models rated on "
    "each bootstrap resample of the test prompts), exact is {n, of, gained, lost, vs, per_category: {CATEGORY: "
    "{n, of, gained, lost}}} (checker score 10 on the task suite)."
)
HARVEST_HELP = (
    "Export training data from the battles of a workspace in TRL's formats: --kind sft (the prompts the target "
    "lost, with the best winning answer: {messages}), dpo or rm (most vs fewest wins, score gap above K: "
    "{prompt, chosen, rejected, margin}); provenance columns ride along. --out: .jsonl, .parquet, or a folder "
    "(a Hugging Face dataset, load_from_disk)."
)


def register(app: typer.Typer) -> None:
    """Add the ``flywheel`` and ``harvest`` commands to ``app``."""
    app.command("flywheel", help=FLYWHEEL_HELP)(flywheel_command)
    app.command("harvest", help=HARVEST_HELP)(harvest_command)


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ci(row: RatedModel | RoundRow | StageRecord) -> str:
    if row.ci_low is None or row.ci_high is None:
        return "-"
    return f"{row.ci_low:.0f}..{row.ci_high:.0f}"


def _delta(d: Delta | None) -> str:
    """Return "+12.3 [+4, +21]": a paired delta and its 95% CI, or "-"."""
    if d is None:
        return "-"
    ci = "" if d.ci_low is None or d.ci_high is None else f" [{d.ci_low:+.0f}, {d.ci_high:+.0f}]"
    return f"{d.rating:+.1f}{ci}"


def _exact(e: ExactAnswers | None) -> str:
    """Return "76/270 (+9 -2)": exact answers, and those gained and lost against the model before, or "-"."""
    if e is None:
        return "-"
    return f"{e.n}/{e.of}" + ("" if e.gained is None else f" (+{e.gained} -{e.lost})")


def print_report(report: FlywheelReport) -> None:
    """Print the round table, the stages, the references, the paired evidence and the data harvested per model."""
    t = Table(title="flywheel rounds (delta: paired, against the round before, 95% CI; exact: right answers, "
              "gained and lost)", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("round", "model", "rating", "95% CI", "delta", "exact", "sft", "dpo", "rm", "train loss"):
        t.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    if report.base is not None:
        b = report.base
        t.add_row("start", escape(b.model), _fmt(b.rating), _ci(b), "", _exact(b.exact), "", "", "", "")
    for r in report.rounds:
        t.add_row(str(r.round), escape(r.model), _fmt(r.rating), _ci(r), _delta(r.delta_prev), _exact(r.exact),
                  str(r.sft_examples), str(r.dpo_pairs), str(r.rm_pairs), _fmt(r.train_loss, 3))
    wide.print(t)
    if report.judges:
        wide.print(escape(report.judges), highlight=False)
    rows = [*report.stages, *report.ablations]
    show_sel = any(s.selection != "pair_judge" for s in rows)
    show_sweep = any(s.sweep for s in rows)
    t = Table(title="stages (data: harvested / trained on; times: answering and judging the slice, training)",
              title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    # The model of stage rR.I-KIND is TARGET-rR-KIND (the round table's names); ablations add -SELECTION.
    for col in ("stage", "slice", *(["selection"] if show_sel else []), "rating", "95% CI", "data", "steps",
                "s/step", "loss", "judge s", "train s"):
        t.add_column(col, justify="left" if col in ("stage", "selection", "slice") else "right", no_wrap=True)
    for s in rows:
        data = str(s.examples) + (f"/{s.trained_on}" if s.trained_on not in (None, s.examples) else "")
        steps = s.train.steps if s.train is not None else None
        t.add_row(s.key, s.slice, *([s.selection] if show_sel else []),
                  _fmt(s.rating) if s.status == "done" else f"({s.status})", _ci(s), data,
                  str(steps or "-"), _fmt(s.train.s_per_step if s.train is not None else None, 2),
                  _fmt(s.train_loss, 3), _fmt(s.seconds.answer_battle), _fmt(s.seconds.train))
    wide.print(t)
    if show_sweep:
        t = Table(title="sweep variants (each from its stage's start, on its stage's data, with these settings "
                  "changed)", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        t.add_column("stage", no_wrap=True)
        t.add_column("settings")
        for s in rows:
            if s.sweep:
                t.add_row(s.key, escape(" ".join(f"{k}={_setting(v)}" for k, v in s.sweep.items())))
        wide.print(t)
    print_slices(report)
    print_allocations(report)
    t = Table(title="references", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("model", "rating", "95% CI"):
        t.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for ref in report.references:
        t.add_row(ref.model, _fmt(ref.rating), _ci(ref))
    wide.print(t)
    print_evidence(report)
    # a row per model that supplied data, a column per stage (the paper's Table 6): a flywheel has few stages and
    # many models (a student per round, its samples), so models as columns were cut to "qw…" on a terminal
    models = sorted({m for s in report.stages for m, n in s.by_model.items() if n})
    if models:
        t = Table(title="data harvested per model (SFT: the winner that supplied the answer; pairs: the chosen "
                  "answer's model)", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        t.add_column("model", no_wrap=True)
        for s in report.stages:
            t.add_column(s.key, justify="right", no_wrap=True)
        t.add_column("total", justify="right", no_wrap=True)
        for m in sorted(models, key=lambda m: -sum(s.by_model.get(m, 0) for s in report.stages)):
            counts = [s.by_model.get(m, 0) for s in report.stages]
            t.add_row(m, *[str(n) for n in counts], str(sum(counts)))
        wide.print(t)


def _setting(value: Any) -> str:
    """Return a sweep variant's setting compactly (lists joined by '+', no spaces)."""
    if isinstance(value, list):
        return "+".join(_setting(v) for v in value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_setting(v)}" for k, v in value.items()) + "}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def print_slices(report: FlywheelReport) -> None:
    """Print each slice's prompts, what decontamination dropped from it (by reason) and the stages it fed."""
    if not report.slices:
        return
    t = Table(title="slices (dropped: a test prompt's text, or a near-copy of a prompt of a test set in the "
              "workspace; never answered, harvested or trained on)", title_justify="left", box=box.SIMPLE_HEAD,
              padding=(0, 1), pad_edge=False)
    for col in ("slice", "prompts", "dropped", "near-copies", "stages"):
        t.add_column(col, justify="right" if col in ("prompts", "dropped") else "left", no_wrap=True)
    for name, raw in report.slices.items():
        rec = SliceRecord.model_validate(raw)
        t.add_row(name, str(rec.prompts), str(rec.dropped_as_test), rec.near_line(),
                  ", ".join(s.key for s in report.stages if s.slice == name) or "-")
    wide.print(t)


def print_allocations(report: FlywheelReport) -> None:
    """Print how each aimed slice (allocate: weakness, learnable) spent its prompts per group, against a uniform
    slice, and the gap to the best reference that aimed it (and, learnable, how training moved the model there)."""
    for name, raw in report.slices.items():
        alloc = SliceRecord.model_validate(raw).allocation
        if alloc is None:
            continue
        t = Table(title=f"slice {name}, allocate: {alloc.rule}, drawn by {alloc.stage} for {alloc.model}: "
                  f"{alloc.why}", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        learnt = any(g.moved is not None for g in alloc.groups)  # allocate: learnable measured it
        for col in (alloc.by, f"gap to {alloc.best or 'best reference'}", "95% CI", "beyond chance (Holm)",
                    *(["moved by training"] * learnt), "prompts", "uniform", "candidates"):
            t.add_column(col, justify="left" if col == alloc.by else "right", no_wrap=True)
        for g in alloc.groups:
            ci = "-" if g.ci_low is None or g.ci_high is None else f"[{g.ci_low:+.0f}, {g.ci_high:+.0f}]"
            moved = ["-" if g.moved is None else f"{g.moved:+.2f}"] if learnt else []
            t.add_row(escape(g.label or g.group), "-" if g.gap is None else f"{g.gap:+.1f}", ci, g.verdict or "-",
                      *moved, str(g.prompts), str(g.uniform), str(g.candidates))
        wide.print(t)


def print_evidence(report: FlywheelReport) -> None:
    """Print the paired deltas of every stage and round, exact answers per category, and the verbosity watch."""
    compared: list[tuple[str, RoundRow | StageRecord]] = [(f"round {r.round}", r) for r in report.rounds]
    # a stage whose model is its round's (the last stage of the round) is that round's row already
    ends = {r.model for r in report.rounds}
    compared += [(s.key, s) for s in [*report.stages, *report.ablations] if s.status == "done" and s.model not in ends]
    if any(x.delta_prev or x.delta_base or x.delta_best_ref for _, x in compared):
        t = Table(title="paired deltas (rating difference in each bootstrap round of the test prompts, 95% CI; "
                  "P: share of rounds above)", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1),
                  pad_edge=False)
        for col in ("", "model", "vs model before", "P", "vs base", "vs best reference", "exact"):
            t.add_column(col, justify="left" if col in ("", "model") else "right", no_wrap=True)
        for label, x in compared:
            p = x.delta_prev.p_better if x.delta_prev is not None else None
            t.add_row(label, escape(x.model), _delta(x.delta_prev), _fmt(p, 2), _delta(x.delta_base),
                      _delta(x.delta_best_ref), _exact(x.exact))
        wide.print(t)
    cats = sorted({c for r in report.rounds if r.exact for c in r.exact.per_category})
    if cats:
        t = Table(title="exact answers per category (gained and lost against the round before)",
                  title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        t.add_column("category", no_wrap=True)
        heads: list[tuple[str, RatedModel | RoundRow]] = (
            [("start", report.base)] if report.base is not None and report.base.exact else [])
        heads += [(f"round {r.round}", r) for r in report.rounds]
        for name, _ in heads:
            t.add_column(name, justify="right", no_wrap=True)
        for c in cats:
            cells = []
            for _, h in heads:
                e = h.exact.per_category.get(c) if h.exact is not None else None
                cells.append("-" if e is None else f"{e.n}/{e.of}" + ("" if e.gained is None
                                                                     else f" (+{e.gained} -{e.lost})"))
            t.add_row(escape(c), *cells)
        wide.print(t)
    watched: list[tuple[str, RatedModel | RoundRow]] = [("start", report.base)] if report.base is not None else []
    watched += [(f"round {r.round}", r) for r in report.rounds]
    watched += [("reference", ref) for ref in report.references]
    if any(w.mean_chars is not None for _, w in watched):
        t = Table(title="verbosity watch (mean answer length on the test set; rating with answer style controlled "
                  "beside the plain one)", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        for col in ("", "model", "chars", "tokens", "rating", "style-controlled", "95% CI"):
            t.add_column(col, justify="left" if col in ("", "model") else "right", no_wrap=True)
        for label, w in watched:
            sci = "-" if w.style_ci_low is None or w.style_ci_high is None else \
                f"{w.style_ci_low:.0f}..{w.style_ci_high:.0f}"
            t.add_row(label, escape(w.model), _fmt(w.mean_chars), _fmt(w.mean_tokens), _fmt(w.rating),
                      _fmt(w.style_rating), sci)
        wide.print(t)
    for label, w in watched:
        for line in w.shortcuts or []:
            wide.print(f"[yellow]shortcut[/yellow] {label} {escape(w.model)}: {escape(line)}")


@user_errors
def flywheel_command(
    config: Annotated[Path, typer.Argument(help="YAML flywheel config (see examples/flywheel.yaml)")],
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", help="workspace directory (default: the "
                                                      "config's, or workspaces/NAME)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the round table as JSON")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config field, e.g. --set "
                                                      "training.sft.epochs=1 (repeatable)")] = None,
    baselines: Annotated[str | None, typer.Option(help="comma-separated selection baselines (all, random, "
                                                     "longest) trained side by side for the ablation; a later run "
                                                     "without it keeps rating those trained, '' drops them")] = None,
    print_launch: Annotated[bool, typer.Option("--print-launch", help="print the command that trains each stage "
                                               "(training.launch: inprocess, accelerate or torchrun) and exit; "
                                               "runs nothing")] = False,
    ray: Annotated[str | None, typer.Option("--ray", help="run the battles' model calls in engine actors on a "
                                               "Ray cluster: its address ('auto', 'ray://host:10001') or 'local'; "
                                               "see scale: in the config")] = None,
    accept_judge_risk: Annotated[bool, typer.Option(
        "--accept-judge-risk", help="harvest even from a judge that failed its canaries")] = False,
) -> None:
    from ..flywheel.rounds import launch_plan, run_flywheel, save_flywheel_config
    from ..flywheel.settings import BASELINES, FlywheelConfig
    from ..pipeline import workspace_for
    from ..scale import scaled

    cfg = load_config_file(config, FlywheelConfig, [*(set_ or []), *ray_overrides(ray)])
    require_for(cfg, f"{config}", {"train": "the flywheel's training"})
    chosen = None
    if baselines is not None:
        chosen = [b.strip() for b in baselines.split(",") if b.strip()]
        bad = [b for b in chosen if b not in BASELINES]
        if bad:
            raise ArenaError(f"--baselines: unknown {', '.join(bad)}; use any of {', '.join(BASELINES)}")
    ws = workspace_for(cfg, workspace)
    if print_launch:
        print_launch_plan(launch_plan(cfg, ws, chosen), json_out)
        return
    with Store(ws) as store, scaled(cfg.scale):
        save_flywheel_config(cfg, store)
        report = run_flywheel(cfg, store, baselines=chosen, accept_judge_risk=accept_judge_risk)
        from ..arena.canaries import stored_reports
        from ..arena.manifest import board_manifest
        from ..pipeline import TEST_SET

        rated = cfg.arena_config([cfg.target, *cfg.references], rating=True)
        manifest = board_manifest(rated, store.get_prompts(TEST_SET),
                                  [r.as_dict() for r in stored_reports(store, rated.judge.name)])
    if json_out:
        typer.echo(json.dumps({**report.as_json(), "manifest": manifest}))
    else:
        print_report(report)
        print_manifest_line(manifest)
        err_console.print(f"workspace: {ws} ({report.seconds:.0f} s)")
    # The report is optional: if it fails, the finished rounds stay in the workspace and the run succeeds.
    write_report_or_warn(ws, err_console)


def print_launch_plan(rows: list[dict], json_out: bool) -> None:
    """Print each stage's training command (stdout: a shell script, or JSON)."""
    from ..scale.launch import shell_line

    if json_out:
        typer.echo(json.dumps(rows))
        return
    if rows and rows[0]["launcher"] == "inprocess":
        typer.echo("# training.launch.launcher is inprocess: `arena flywheel` trains each stage itself; the same "
                   "training as its own process would be:")
    for r in rows:
        typer.echo(f"# {r['stage']} ({r['kind']}): the round runner writes {r['job']} when the stage's data is "
                   f"harvested, then runs")
        typer.echo(shell_line(r["command"]))


@user_errors
def harvest_command(
    workspace: Annotated[Path, typer.Argument(help="an arena or flywheel workspace")],
    kind: Annotated[str, typer.Option("--kind", help="sft, dpo or rm")] = "sft",
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="output: FILE.jsonl, FILE.parquet or a folder (HF dataset)")] = Path("harvest.jsonl"),
    set_name: Annotated[str, typer.Option("--prompt-set", help="the prompt set whose battles to harvest (a flywheel "
                                          "slice is flywheel/NAME)")] = DEFAULT_SET,
    old_set_name: Annotated[str | None, typer.Option(
        "--set", hidden=True, help="deprecated spelling of --prompt-set")] = None,
    target: Annotated[str | None, typer.Option(
        help="sft: the model trained (default: the run's battles.target)")] = None,
    models: Annotated[str | None, typer.Option(
        help="comma-separated models: sft: the references (default: all others); dpo/rm: the models whose answers "
             "pair up (default: all)")] = None,
    judge: Annotated[str | None, typer.Option(help="the judge whose battles to use (default: the only one)")] = None,
    selection: Annotated[str, typer.Option(help="pair_judge, or a baseline: all, random, longest")] = "pair_judge",
    threshold: Annotated[float, typer.Option(help="sft: the target lost by more than this score gap")] = 0.0,
    min_score: Annotated[float | None, typer.Option(
        "--min-score", help="sft: a winning answer supplies an example only if its judge score is at least this "
        "(with the verifier, 10: exactly right)")] = None,
    k: Annotated[float, typer.Option("--k", help="dpo/rm: drop pairs whose score gap is at most K")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed of the random baseline")] = 0,
    fmt: Annotated[str | None, typer.Option("--format", help="jsonl, parquet or hf (default: by --out)")] = None,
    accept_judge_risk: Annotated[bool, typer.Option(
        "--accept-judge-risk", help="harvest from a judge that failed its canaries (see `arena leaderboard`)")] = False,
    lineage: Annotated[bool, typer.Option(
        "--lineage", help="add to each row the judge and the battles on its prompt that decided it")] = False,
) -> None:
    from ..arena.canaries import judge_risk_error
    from ..flywheel.export import export_items
    from ..flywheel.harvest import PreferenceItem, SFTItem, per_model_counts, select_pairs, select_sft
    from ..flywheel.kinds import DATA_KINDS

    if kind not in DATA_KINDS:
        raise ArenaError(f"--kind {kind!r}: use {', '.join(list(DATA_KINDS)[:-1])} or {list(DATA_KINDS)[-1]}")
    data = DATA_KINDS[kind]
    if old_set_name is not None:
        if set_name != DEFAULT_SET and set_name != old_set_name:
            raise ArenaError(f"--set {old_set_name!r} and --prompt-set {set_name!r} name two prompt sets: "
                             "use --prompt-set alone")
        typer.echo(f"warning: `arena harvest --set NAME` is deprecated (every other --set is key=value); "
                   f"use --prompt-set {old_set_name}", err=True)
        set_name = old_set_name
    with Store(workspace, readonly=True) as store:
        prompts = store.get_prompts(set_name)
        if not prompts:
            sets = ", ".join(sorted(store.prompt_sets())) or "none"
            raise ArenaError(f"{workspace} has no prompt set {set_name!r} (sets: {sets})")
        battles = store.get_battles(judge, set_name=set_name)
        answers = store.get_answers(set_name=set_name)
        saved = store.get_meta("config") or {}
        judges = sorted({b.judge for b in battles})
        risk = judge_risk_error(store, judges[0]) if len(judges) == 1 and not accept_judge_risk else None
    if not battles:
        raise ArenaError(f"{workspace} has no battles in set {set_name!r}" + (f" by judge {judge!r}" if judge else ""))
    if len(judges) > 1:
        raise ArenaError(f"battles of several judges ({', '.join(judges)}) in set {set_name!r}: choose one with "
                         "--judge")
    if risk is not None:
        raise ArenaError(risk)
    in_battles = {m for b in battles for m in (b.model_a, b.model_b)}
    order = [m["name"] for m in saved.get("models", []) if m.get("name") in in_battles]
    order += sorted(in_battles - set(order))
    chosen = [m.strip() for m in models.split(",")] if models else None
    for m in chosen or []:
        if m not in in_battles:
            raise ArenaError(f"--models: {m!r} has no battles in set {set_name!r} (models: {', '.join(order)})")
    if not data.pairs:
        target = target or (saved.get("battles") or {}).get("target")
        if target is None or target not in in_battles:
            raise ArenaError(f"--target: give the model trained (models with battles in {set_name!r}: "
                             f"{', '.join(order)})")
        refs = chosen or [m for m in order if m != target]
        items: list[SFTItem] | list[PreferenceItem] = select_sft(
            selection, prompts, answers, battles, target=target, references=refs, threshold=threshold,
            min_score=min_score, seed=seed,
            slice_name=set_name)
    else:
        items = select_pairs(selection, prompts, answers, battles, models=chosen or order, k=k, seed=seed,
                             slice_name=set_name)
    if lineage:
        from ..flywheel.export import pair_rows, sft_rows, write_rows
        from ..flywheel.lineage import with_lineage

        rows = pair_rows(items) if data.pairs else sft_rows(items)  # type: ignore[arg-type]  # data says which
        path = write_rows(with_lineage(rows, items, judges[0], battles), out, fmt, kind=data.export)
    else:
        path = export_items(items, out, fmt, kind=data.export)
    what = data.rows
    err_console.print(f"{len(items)} {kind} {what} from {len(battles)} battles in {set_name!r}; by model: "
                      + (", ".join(f"{m} {n}" for m, n in per_model_counts(items).items()) or "none"), highlight=False)
    typer.echo(str(path))
