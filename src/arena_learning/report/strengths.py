"""The report's strengths and weaknesses: a model x category view of paired gaps (x cluster, under its label, for a
test set without categories), each cell a way into its battles;
and how a flywheel's aimed slices (``allocate: weakness``, ``learnable``) spent their prompts on those gaps.

Each model in turn is the target of ``rating.gaps.group_gaps``: per category, its rating minus that
of the best other model of the overall board (every model resampled together over the category's
prompts), Holm-corrected over the categories. A cell is coloured by that difference (red: behind,
blue: ahead, stronger the larger, full at ``FULL`` points) and marked where the corrected gap is beyond
chance; a click filters the battle browser to the model and the category (report.js). Every text is
escaped here; the colours are made from numbers alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from ..errors import ArenaError
from ..flywheel_state import FlywheelState
from ..rating.gaps import GroupGap, group_gaps_of
from ..records import Battle, Prompt, Rating
from .charts import esc

FULL = 200.0
"""Rating points at which a cell's colour is full."""
MIN_PROMPTS = 10
"""A category with fewer prompts is shown but not tested (``arena leaderboard --by --target``'s default)."""
MARKS = {"behind": "\u25bc", "ahead": "\u25b2"}


def _colour(delta: float | None) -> str:
    """Return a cell's background for a rating difference: red behind, blue ahead, grey unknown."""
    if delta is None:
        return "#f3f4f6"
    d = max(-1.0, min(1.0, delta / FULL))
    rgb = "31,78,133" if d >= 0 else "178,34,34"
    return f"rgba({rgb},{0.08 + 0.6 * abs(d):.2f})"


def _cell(model: str, row: GroupGap | None) -> str:
    """Return one cell: the gap to the best other model, a mark beyond chance, a title with the figures."""
    if row is None:
        return '<td class="mg-none">-</td>'
    best, fld = row.best, row.field
    name = row.group if row.label is None else f"{row.label} ({row.group})"
    text = "-" if best is None else f"{best.delta:+.0f}"
    mark = MARKS.get(row.verdict, "")
    if best is None:
        title = f"{model} in {name}: {row.prompts} prompts, too few to test"
    else:
        ci = "" if best.ci_low is None or best.ci_high is None else f" [{best.ci_low:+.0f}, {best.ci_high:+.0f}]"
        p = "" if best.p_adjusted is None else f", Holm-corrected p {best.p_adjusted:.3g}"
        vs_field = "" if fld is None else f"; against the field {fld.delta:+.1f}"
        title = (f"{model} in {name}: {best.delta:+.1f}{ci} against {best.other}{p}{vs_field}; "
                 f"{row.prompts} prompts, {row.battles} battles. Click: its battles")
    return (f'<td class="mg" tabindex="0" data-model="{esc(model)}" data-cat="{esc(row.group)}" '
            f'style="background:{_colour(None if best is None else best.delta)}" title="{esc(title)}">'
            f'{esc(text)}{(" " + mark) if mark else ""}</td>')


def view_groups(prompts: Sequence[Prompt]) -> tuple[str, list[str], dict[str, str]]:
    """Return how the view groups the test set, its groups and their labels: the categories; where no prompt has
    one (a test set built from real prompts), the clusters under the labels ``arena testset build`` stored, as
    the battle browser groups them (``report/browser.py``: a prompt's category, else its cluster)."""
    from ..pipeline import group_labels

    cats = sorted({p.category for p in prompts if p.category})
    if cats:
        return "category", cats, {}
    clusters = sorted({p.cluster for p in prompts if p.cluster}, key=lambda c: (len(c), c))  # c2 before c10
    return "cluster", clusters, group_labels(prompts, "cluster")


def strengths_html(ratings: Sequence[Rating], battles: Sequence[Battle], prompts: Sequence[Prompt], *,
                   bootstrap: int, seed: int, alpha: float = 0.05) -> str:
    """Return the model x group view (empty when the test set has fewer than two categories or clusters)."""
    by, groups, labels = view_groups(prompts)
    plural = {"category": "categories", "cluster": "clusters"}[by]
    if len(groups) < 2 or not battles or len(ratings) < 2:
        return ""
    played = {m for b in battles for m in (b.model_a, b.model_b)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # one call: each group is rated once for all models (a model without battles: its row stays empty)
            reports = group_gaps_of(battles, prompts, by, [r.model for r in ratings if r.model in played],
                                    bootstrap=max(bootstrap, 2), seed=seed, min_prompts=MIN_PROMPTS, alpha=alpha,
                                    labels=labels)
    except ArenaError:  # one model played alone: no gaps to show
        reports = {}
    grid: dict[str, dict[str, GroupGap]] = {m: {g.group: g for g in rep.groups} for m, rep in reports.items()}
    head = "".join(f'<th title="{esc(by)} {esc(g)}">{esc(labels[g] + " (" + g + ")" if g in labels else g)}</th>'
                   for g in groups)
    rows = "".join(f'<tr><td class="l">{esc(r.model)}</td>'
                   + "".join(_cell(r.model, grid.get(r.model, {}).get(g)) for g in groups) + "</tr>" for r in ratings)
    note = (f'<p class="note">Each cell: the model\'s rating minus the best other model\'s (of the overall board) on '
            f"the {by}'s battles alone, both resampled together over its prompts ({max(bootstrap, 2)} rounds); "
            f"red behind, blue ahead. {MARKS['behind']} / {MARKS['ahead']}: behind / ahead beyond chance at "
            f"{alpha:g} after Holm's correction over the {plural}; {plural} under "
            f"{MIN_PROMPTS} prompts are not tested. Hover for the interval and the gap to the field; click a cell "
            f"for its battles. In the terminal: <code>arena leaderboard WS --by {by} --target MODEL</code>.</p>")
    return (note + f'<div class="wide"><table id="strengths-table" data-by="{by}"><thead><tr><th class="l">model'
            f"</th>{head}</tr></thead><tbody>{rows}</tbody></table></div>")


def aimed_slices_html(state: FlywheelState) -> str:
    """Return a table per aimed slice of the flywheel: per group its gap, verdict and prompts against uniform."""
    out = []
    for name, rec in state.slices.items():
        a = rec.allocation
        if a is None:
            continue
        rows = []
        learnt = any(g.moved is not None for g in a.groups)  # allocate: learnable measured how training moved it
        for g in a.groups:
            ci = "-" if g.ci_low is None or g.ci_high is None else f"{g.ci_low:+.0f} .. {g.ci_high:+.0f}"
            moved = (f"<td>{'-' if g.moved is None else f'{g.moved:+.2f}'}</td>") if learnt else ""
            rows.append(f'<tr><td class="l">{esc(g.label or g.group)}</td>'
                        f'<td style="background:{_colour(g.gap)}">{"-" if g.gap is None else f"{g.gap:+.1f}"}</td>'
                        f"<td>{esc(ci)}</td><td>{esc(g.verdict or '-')}</td>{moved}<td>{g.prompts}</td>"
                        f"<td>{g.uniform}</td><td>{g.candidates}</td></tr>")
        head = "".join(f"<th>{esc(h)}</th>" for h in (f"gap to {a.best or 'best reference'}", "95% CI",
                                                       "beyond chance (Holm)", *(["moved by training"] * learnt),
                                                       "prompts", "uniform", "candidates"))
        out.append(f"<h4>Slice {esc(name)}: allocate: {esc(a.rule)}, drawn by {esc(a.stage)} for {esc(a.model)}</h4>"
                   f'<p class="note">{esc(a.why)}.</p><table><thead><tr><th class="l">{esc(a.by)}</th>{head}</tr>'
                   f"</thead><tbody>{''.join(rows)}</tbody></table>")
    if not out:
        return ""
    return ('<h3>Aimed slices</h3><p class="note">How each slice drawn by <code>allocate</code> spent its prompts: '
            "per group the model's gap to the best reference on the test set when the slice was drawn, and the "
            "prompts it got against a uniform slice of the same size (each group at least half its uniform "
            "share).</p>" + "".join(out))
