"""The HTML report of a workspace: one self-contained file (inline CSS and SVG, no scripts).

Sections: the run (test set, contestants, judge), the leaderboard with a 95% CI plot,
ratings with and without style control, the pairwise win matrix (predicted by the
ratings, observed in the battles), the judge audit, and tokens and cost. Every text
from the workspace is escaped: model names and prompts are data.
"""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import ArenaError
from ..records import Rating
from ..store import Store

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#1d232a;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2.2rem;border-bottom:1px solid #d7dde3;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0}th,td{padding:.25rem .6rem;text-align:right;border-bottom:1px solid #eef1f4}
th{background:#f5f7f9}td.l,th.l{text-align:left}.note{color:#5b6672;font-size:.9rem}
.cell{min-width:4.5rem}svg text{font:12px system-ui,sans-serif;fill:#1d232a}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(headers: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Return an HTML table; ``rows`` hold already-escaped cell HTML; the first ``left`` columns align left."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def ci_plot(ratings: list[Rating], width: int = 640) -> str:
    """Return an SVG of each model's rating (dot) and 95% interval (bar), best first."""
    if not ratings:
        return ""
    lows = [r.ci_low if r.ci_low is not None else r.rating for r in ratings]
    highs = [r.ci_high if r.ci_high is not None else r.rating for r in ratings]
    lo, hi = min(lows), max(highs)
    pad = max((hi - lo) * 0.08, 1.0)
    lo, hi = lo - pad, hi + pad
    label_w, row_h = 220, 24
    plot_w = width - label_w - 20
    height = row_h * len(ratings) + 30

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="ratings with 95% confidence intervals">']
    for i, (r, a, b) in enumerate(zip(ratings, lows, highs)):
        y = 15 + i * row_h
        parts.append(f'<text x="{label_w - 8}" y="{y + 4}" text-anchor="end">{_e(r.model)}</text>')
        parts.append(f'<line x1="{x(a):.1f}" x2="{x(b):.1f}" y1="{y}" y2="{y}" stroke="#7aa6d6" stroke-width="6"/>')
        parts.append(f'<circle cx="{x(r.rating):.1f}" cy="{y}" r="4.5" fill="#1f4e85"/>')
    axis_y = height - 10
    for v in (lo + pad, (lo + hi) / 2, hi - pad):
        parts.append(f'<text x="{x(v):.1f}" y="{axis_y}" text-anchor="middle">{v:.0f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _heat(p: float) -> str:
    """Return a background colour for a win probability: blue above 0.5, red below."""
    d = max(-1.0, min(1.0, (p - 0.5) * 2))
    if d >= 0:
        return f"rgba(31,78,133,{0.08 + 0.5 * d:.2f})"
    return f"rgba(178,34,34,{0.08 + 0.5 * -d:.2f})"


def build_report(workspace: str | Path) -> str:
    """Return the HTML report of the run stored in ``workspace``."""
    from ..pipeline import TEST_SET, load_saved_config, stage_ratings, stage_style_control, usage
    from ..rating.counts import BattleTable
    from ..rating.winrate import observed_win_matrix, predicted_win_matrix

    root = Path(workspace)
    if not (root / "arena.db").is_file():
        raise ArenaError(f"{root} is not a workspace (no arena.db): give the directory a run wrote to")
    with Store(root, readonly=True) as store:
        cfg = load_saved_config(store)
        ratings = stage_ratings(cfg, store)
        battles = store.get_battles(cfg.judge.name)
        prompts = store.get_prompts(TEST_SET)
        usage_rows = usage(cfg, store)
        judge_stats = store.get_meta(f"judge_stats/{cfg.judge.name}")
        try:
            style = stage_style_control(cfg, store)
            style_note = ""
        except ArenaError as err:  # e.g. answers that never differ in style: say so, keep the report
            style, style_note = None, str(err)

    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>Arena report: {_e(cfg.name)}</title>"
           f"<style>{CSS}</style></head><body>", f"<h1>Arena report: {_e(cfg.name)}</h1>"]

    # -- the run
    source = "the built-in task suite" if cfg.prompts is None else (cfg.prompts.set or cfg.prompts.path)
    groups = Counter(p.category or p.cluster or "-" for p in prompts)
    out.append("<h2>The run</h2>")
    out.append(f"<p>{len(prompts)} prompts from {_e(source)}; {len(cfg.models)} contestants; judge "
               f"<b>{_e(cfg.judge.name)}</b> ({_e(cfg.judge.kind)}"
               + (f", {_e(cfg.judge.template)}" if cfg.judge.kind == "llm" else "") + f"); schedule "
               f"{_e(cfg.battles.schedule)}; {len(battles)} battles; workspace <code>{_e(root)}</code>.</p>")
    out.append(_table(["category / cluster", "prompts"],
                      [[_e(g), str(n)] for g, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))]))

    # -- leaderboard
    r = cfg.ratings
    out.append("<h2>Leaderboard</h2>")
    out.append(f'<p class="note">Bradley-Terry, scale 400, {"anchor " + _e(r.anchor) if r.anchor else "mean 1000"}; '
               f"95% intervals from {r.bootstrap} bootstrap rounds resampling {_e(r.resample)}s; rank CI is 1 + the "
               f"number of models whose lower bound is above this model's upper bound.</p>")
    out.append(_table(
        ["rank", "model", "rating", "95% CI", "rank CI", "wins", "losses", "ties", "battles"],
        [[str(x.rank or ""), _e(x.model), _num(x.rating),
          f"{_num(x.ci_low, 0)} .. {_num(x.ci_high, 0)}" if x.ci_low is not None else "-",
          str(x.rank_ci or "-"), str(x.wins), str(x.losses), str(x.ties), str(x.battles)] for x in ratings],
        left=2,
    ))
    out.append(ci_plot(ratings))

    # -- style control
    out.append("<h2>Style control</h2>")
    if style is None:
        out.append(f'<p class="note">Not fitted: {_e(style_note)}</p>')
    else:
        out.append('<p class="note">Contextual Bradley-Terry with the normalised differences of answer length, '
                   "markdown headers, lists and bold as extra features (as Chatbot Arena does).</p>")
        out.append(_table(
            ["model", "rating", "controlled", "controlled 95% CI", "rank", "delta"],
            [[_e(row["model"]), _num(row["rating"]), _num(row["rating_controlled"]),
              f"{_num(row['ci_low_controlled'], 0)} .. {_num(row['ci_high_controlled'], 0)}"
              if row["ci_low_controlled"] is not None else "-",
              f"{row['rank']} &rarr; {row['rank_controlled']}", f"{row['delta']:+.1f}"] for row in style.to_rows()],
        ))
        coefs = ", ".join(f"{_e(k)} {v:+.3f}" for k, v in style.coefficient_table().items())
        out.append(f'<p class="note">Style coefficients (log-odds per SD; + means the judge prefers more): {coefs}</p>')

    # -- win matrix
    if battles:
        models, predicted = predicted_win_matrix(ratings)
        obs_models, observed, games = observed_win_matrix(BattleTable.from_battles(battles))
        idx = {m: i for i, m in enumerate(obs_models)}
        out.append("<h2>Win matrix</h2><p class=\"note\">Row beats column: the chance predicted by the ratings, "
                   "and in brackets the share of points the row actually took (ties count half).</p>")
        rows = []
        for i, a in enumerate(models):
            cells = [_e(a)]
            for j, b in enumerate(models):
                if i == j:
                    cells.append("")
                    continue
                n = games[idx[a], idx[b]]
                obs = f" ({100 * observed[idx[a], idx[b]]:.0f})" if n else ""
                cells.append(f'<span class="cell" style="display:block;background:{_heat(predicted[i, j])}">'
                             f"{100 * predicted[i, j]:.0f}%{obs}</span>")
            rows.append(cells)
        out.append(_table(["row beats column", *models], rows))

    # -- judge
    out.append("<h2>Judge</h2>")
    if judge_stats:
        out.append(f"<p>{judge_stats['requests']} verdicts asked: {judge_stats['parsed']} parsed, "
                   f"{judge_stats['retried']} parsed after a retry, {judge_stats['failed']} failed (kept with their "
                   f"raw text); {judge_stats['flagged']} judgments with an answer that addresses the judge.</p>")
    if cfg.judge.kind == "verifier":
        out.append('<p class="note">The verifier judge scores each answer alone and sees no order: its "first '
                   'shown" is the first model of each pair in config order, so position bias here measures the '
                   "contestants, not the judge.</p>")
    out.append(_audit_html(root))

    # -- usage
    out.append("<h2>Tokens and cost</h2>")
    out.append(_table(["role", "model", "calls", "tokens in", "tokens out", "cost"],
                      [[_e(u["role"]), _e(u["name"]), str(u["calls"]), str(u["tokens_in"]), str(u["tokens_out"]),
                        f"${u['cost']:.4f}" if u["cost"] else "-"] for u in usage_rows], left=2))
    out.append("</body></html>")
    return "\n".join(out)


def _audit_html(root: Path) -> str:
    from ..arena.audit import audit_workspace

    try:
        audit = audit_workspace(root).to_dict()
    except ArenaError as err:
        return f'<p class="note">No audit: {_e(err)}</p>'

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    rows = []
    for a in audit["judges"]:
        pb, lb = a.get("position_bias_ci"), a.get("length_bias_ci")
        rows.append([
            _e(a["judge"]), str(a["games"]), pct(a["parse_failure_rate"]), pct(a["tie_rate"]),
            pct(a["position_bias"]) + (f" [{pct(pb[0])}, {pct(pb[1])}]" if pb else ""),
            pct(a["order_consistency"]),
            pct(a["length_bias"]) + (f" [{pct(lb[0])}, {pct(lb[1])}]" if lb else ""),
            str(a["injection_flags"]),
        ])
    return _table(["judge", "games", "parse failures", "ties", "first shown wins (0.5 = no bias)",
                   "same verdict both orders", "longer answer wins", "flagged"], rows)


def write_report(workspace: str | Path, path: str | Path | None = None) -> Path:
    """Write the report of ``workspace`` (default ``WORKSPACE/report.html``) and return its path."""
    target = Path(path) if path is not None else Path(workspace) / "report.html"
    target.write_text(build_report(workspace), encoding="utf-8")
    return target
