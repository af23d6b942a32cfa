"""CLI commands ``arena scores`` (MT-Bench-style absolute scores) and ``arena lc-winrate``
(AlpacaEval 2's length-controlled win rate), and the printer of ``arena leaderboard --by``.

Thin: open the workspace read-only, call the pipeline stage, print a table or JSON on stdout.
Errors the user can fix are ``ArenaError``: printed on stderr, exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..errors import ArenaError
from ..store import Store
from .consoles import print_manifest_line, stderr_console, stdout_console
from .errors import user_errors
from .tables import fmt, leaderboard_table

SCORES_HELP = (
    "Absolute scores of single-answer grading (MT-Bench style, FastChat's show_result): per model the mean "
    "grade over every graded turn with a 95% CI (bootstrap over prompts), the mean of each turn and of each "
    "category with counts, and the answers left without a grade because their judgment failed.\n\n"
    "Needs a judge that grades answers alone: an LLM judge with `template: single` (1-10) or the verifier "
    "(its checkers' 0-10)."
)
LC_HELP = (
    "Raw and length-controlled win rate of every model against a reference model (AlpacaEval 2): the LC win "
    "rate is what a logistic model of the judge's preferences, with terms for the model, the normalised length "
    "difference (tanh) and the instruction's difficulty, predicts with no length difference, averaged over "
    "prompts. 95% CIs by bootstrap over prompts. Lengths are characters of the answers.\n\n"
    "The length slope is the judge's and is pooled over the models by default (a model longer than the "
    "reference on nearly every prompt cannot tell it from its quality on its own; such a model is named in a "
    "warning); --length-slope per-model fits one per model, as AlpacaEval does.\n\n"
    "--alpaca-eval-exact computes it as the alpaca_eval package does (their formula, their cross-validated L1 "
    "fit, the same rows in the same order: equal to the digit), to set a figure beside their leaderboard; give "
    "their df_gamed.csv with --gamed (gamed baselines at weight 0.1 each, and their instruction difficulties) or "
    "their instruction_difficulty.csv with --instruction-difficulty; without either, the difficulty is this "
    "workspace's own. A prompt's index is its position in the test set."
)


def register(app: typer.Typer) -> None:
    """Add the ``scores`` and ``lc-winrate`` commands to ``app``."""
    app.command("scores", help=SCORES_HELP)(scores_command)
    app.command("lc-winrate", help=LC_HELP)(lc_winrate_command)




@user_errors
def scores_command(
    workspace: Annotated[Path, typer.Argument(help="Workspace directory of a run.")],
    judge: Annotated[str | None, typer.Option(
        help="Judge whose grades to use (default: the run's judge, or the workspace's only judge; a panel member "
             "by name).")] = None,
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", "-b", min=0, help="Bootstrap rounds of the 95% CI (0: none).")] = 1000,
    json_out: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """Print the MT-Bench-style scores table (help text: ``SCORES_HELP``)."""
    from ..pipeline import load_saved_config, stage_scores

    with Store(workspace, readonly=True) as store:
        # judgments imported with `arena import-judgments` need no run config, only --judge
        cfg = load_saved_config(store) if store.get_meta("config") is not None else None
        if cfg is None and judge is None and len(store.judgment_judges()) == 1:
            judge = store.judgment_judges()[0]  # imported judgments of one judge: nothing to choose
        name, rows = stage_scores(cfg, store, judge, bootstrap=bootstrap, seed=cfg.ratings.seed if cfg else 0)
    from ..pipeline import workspace_manifest

    if json_out:
        sys.stdout.write(json.dumps({"judge": name, "models": [r.as_dict() for r in rows],
                                     "manifest": workspace_manifest(workspace, name)}, indent=2) + "\n")
        return
    turns = sorted({t for r in rows for t in r.turns})
    cats = sorted({c for r in rows for c in r.categories})
    table = Table(title=escape(f"scores by {name} (mean grade; n = graded turns)"), title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("model", no_wrap=True)
    for col in ("mean", "95% CI", *(f"turn {t}" for t in turns), "graded", "failed"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        ci = f"{r.ci_low:.2f}..{r.ci_high:.2f}" if r.ci_low is not None and r.ci_high is not None else "-"
        cells = [f"{fmt(r.turns[t].mean, 2)} ({r.turns[t].n})" if t in r.turns else "-" for t in turns]
        table.add_row(escape(r.model), fmt(r.mean, 2), ci, *cells, str(r.graded), str(r.failed))
    stdout_console().print(table)
    print_manifest_line(workspace_manifest(workspace, name))
    if len(cats) > 1 or (cats and cats != ["-"]):
        by_cat = Table(title="by category (n)", title_justify="left", box=box.SIMPLE_HEAD,
                       padding=(0, 1), pad_edge=False)
        by_cat.add_column("model", no_wrap=True)
        for c in cats:
            by_cat.add_column(escape(c), justify="right", no_wrap=True)
        for r in rows:
            by_cat.add_row(escape(r.model), *(f"{fmt(r.categories[c].mean, 2)} ({r.categories[c].n})"
                                      if c in r.categories else "-" for c in cats))
        stdout_console().print(by_cat)
    failed = sum(r.failed for r in rows)
    if failed:
        stderr_console().print(f"[yellow]{failed} grading{'s' if failed > 1 else ''} failed and left no grade "
                                   "(kept with the judge's raw text; in a run, `arena battle` with more "
                                   "`judge.retries` asks again)",
                                   highlight=False, soft_wrap=True)


@user_errors
def lc_winrate_command(
    workspace: Annotated[Path, typer.Argument(help="Workspace directory of a run.")],
    reference: Annotated[str | None, typer.Option(
        "--reference", "-r", help="The reference model every model is compared with (AlpacaEval's baseline; "
                                  "default: the run's battles.baseline).")] = None,
    bootstrap: Annotated[int | None, typer.Option(
        "--bootstrap", "-b", min=0, help="Bootstrap rounds of the 95% CIs (0: none; default 200, or 0 with "
                                         "--alpaca-eval-exact, whose fits cost 50 times more).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
    length_slope: Annotated[str, typer.Option(
        "--length-slope", help="'pooled': one length slope for every model (the judge's; default), or "
                               "'per-model' (AlpacaEval's form).")] = "pooled",
    alpaca_eval_exact: Annotated[bool, typer.Option(
        "--alpaca-eval-exact", help="Compute it exactly as the alpaca_eval package does (see above).")] = False,
    gamed: Annotated[Path | None, typer.Option(
        "--gamed", help="AlpacaEval's df_gamed.csv (.gz too): gamed baselines and instruction difficulties; "
                        "with --alpaca-eval-exact.")] = None,
    difficulty: Annotated[Path | None, typer.Option(
        "--instruction-difficulty", help="AlpacaEval's instruction_difficulty.csv (index, difficulty); with "
                                         "--alpaca-eval-exact.")] = None,
) -> None:
    """Print raw and length-controlled win rates against ``reference`` (help text: ``LC_HELP``)."""
    from ..pipeline import load_saved_config, stage_lc_winrates

    with Store(workspace, readonly=True) as store:
        cfg = load_saved_config(store)
        reference = reference or cfg.battles.baseline
        if reference is None:
            raise ArenaError("name the reference model with --reference M (the run has no battles.baseline)")
        if bootstrap is None:
            bootstrap = 0 if alpaca_eval_exact else 200
        rows = stage_lc_winrates(cfg, store, reference, bootstrap=bootstrap, length_slope=length_slope,
                                 alpaca_eval_exact=alpaca_eval_exact, gamed=gamed, difficulty=difficulty)
    if json_out:
        sys.stdout.write(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
        return
    how = f"length slope {length_slope}"
    if alpaca_eval_exact:
        how = "computed as alpaca_eval does, " + ("with their gamed rows" if gamed else
                                                  "their difficulties" if difficulty else
                                                  "no gamed rows, this workspace's difficulties")
    table = Table(title=escape(f"win rate against {reference}, raw and length-controlled (percent; {how})"),
                  title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("model", no_wrap=True)
    for col in ("LC win rate", "95% CI", "win rate", "95% CI", "battles", "avg length", "length coef"):
        table.add_column(col, justify="right", no_wrap=True)

    def ci(lo: float | None, hi: float | None) -> str:
        return f"{lo:.1f}..{hi:.1f}" if lo is not None and hi is not None else "-"

    for r in rows:
        name = escape(r.model) + ("" if r.length_identified else " *")
        table.add_row(name, fmt(r.lc_win_rate), ci(r.lc_low, r.lc_high), fmt(r.win_rate), ci(r.win_low, r.win_high),
                      str(r.battles), f"{r.avg_length:.0f} (ref {r.reference_avg_length:.0f})", f"{r.length_coef:+.2f}")
    stdout_console().print(table)
    if not all(r.length_identified for r in rows):
        stdout_console().print("* its own length term is not identified (see the warning)", highlight=False)
    left_out = [r for r in rows if r.unknown_length]
    if left_out:
        stdout_console().print(escape("battles left out, an answer's length unknown: "
                                      + ", ".join(f"{r.model} {r.unknown_length}" for r in left_out)),
                               highlight=False, soft_wrap=True)


def _labels(found: dict[str, str], names: Path | None) -> dict[str, str]:
    """Return the groups' labels: the stored ones, replaced by the user's names file where it names a group."""
    from ..curate.labels import read_names

    return {**found, **read_names(names)} if names is not None else found


def print_group_boards(workspace: Path, by: str, json_out: bool, names: Path | None = None) -> None:
    """Print one leaderboard per ``by`` group of the workspace's prompts (``arena leaderboard --by``)."""
    from ..pipeline import load_saved_config, stage_group_boards
    from ..rating.export import ratings_to_json
    from ..rating.groups import GROUP_BY

    if by not in GROUP_BY:
        raise ArenaError(f"--by {by}: cannot group by {by!r}; choose one of {', '.join(GROUP_BY)}")
    from ..pipeline import TEST_SET, group_labels

    with Store(workspace, readonly=True) as store:
        boards, skipped = stage_group_boards(load_saved_config(store), store, by)
        labels = _labels(group_labels(store.get_prompts(TEST_SET), by), names)
    if json_out:
        sys.stdout.write(json.dumps({"by": by, "groups": {g: ratings_to_json(b) for g, b in boards.items()},
                                     "labels": labels, "skipped": skipped}, indent=2) + "\n")
        return
    for name, board in boards.items():
        n = sum(r.battles for r in board) // 2
        label = f" {labels[name]}" if name in labels else ""
        stdout_console().print(leaderboard_table(board, title=f"{by} {name}{label} ({n} battles)"))
    for name, why in skipped.items():
        stderr_console().print("[yellow]" + escape(f"{by} {name}: no leaderboard ({why})"), highlight=False,
                                   soft_wrap=True)


def _gap_cell(gap, alpha: float) -> str:  # gap: rating.gaps.Gap | None
    if gap is None:
        return ""
    ci = "" if gap.ci_low is None else f" [{gap.ci_low:+.0f}, {gap.ci_high:+.0f}]"
    mark = "*" if gap.verdict(alpha) else ""
    return f"{gap.delta:+.1f}{ci}{mark}"


def print_group_gaps(workspace: Path, by: str, target: str, json_out: bool, min_prompts: int,
                     names: Path | None = None, judge: str | None = None) -> None:
    """Print the target's per-group gaps (``arena leaderboard --by GROUP --target M``), behind beyond chance first."""
    from ..pipeline import stage_group_gaps
    from ..rating.groups import GROUP_BY
    from .peers import _pick_judge

    if by not in GROUP_BY:
        raise ArenaError(f"--by {by}: cannot group by {by!r}; choose one of {', '.join(GROUP_BY)}")
    with Store(workspace, readonly=True) as store:
        judge = _pick_judge(store, judge, list(store.info()["judges"]))
        report, texts = stage_group_gaps(store, by, target, judge, min_prompts=min_prompts, names=_labels({}, names))
    if json_out:
        out = report.as_dict()
        out["prompt_texts"] = texts
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    table = Table(title=f"{target} by {by}: gap to {report.best_other} (the best other model overall) and to the "
                        f"field, rating points, 95% CI; * beyond chance after {report.correction.title()}'s "
                        f"correction over the groups tested (alpha {report.alpha})", box=box.SIMPLE_HEAD)
    for col in ("group", "prompts", f"vs {report.best_other}", "adj. p", "vs field", "verdict", "lost, e.g."):
        table.add_column(col, justify="right" if col in ("prompts", "adj. p") else "left", overflow="fold")
    for g in report.groups:
        name = g.group if not g.label else f"{g.group} {g.label}"
        p = "" if g.best is None or g.best.p_adjusted is None else f"{g.best.p_adjusted:.3f}"
        lost = next((texts.get(pid, pid) for pid in g.lost), "")
        lost = lost if len(lost) <= 48 else lost[:47] + "…"
        table.add_row(escape(name), str(g.prompts), _gap_cell(g.best, report.alpha), p,
                      _gap_cell(g.field, report.alpha), g.verdict, escape(lost))
    stdout_console().print(table)
    behind = report.behind
    stderr_console().print(
        f"{len(behind)} of {sum(g.verdict != 'too small' for g in report.groups)} groups behind beyond chance"
        + (f"; {sum(g.verdict == 'too small' for g in report.groups)} below {min_prompts} prompts not tested"
           if any(g.verdict == "too small" for g in report.groups) else ""), highlight=False)
