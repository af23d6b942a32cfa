"""The HTML report of a workspace: one page that works from ``file://`` with no network.

Sections: the run; the leaderboard (rating, 95% CI, rank with CI, W/L/T, tokens, cost) with a
CI plot; style control; win rates (predicted and observed heatmaps, battles per pair); ratings
per category and per test-set subset; the judge audit per judge; the test set's cluster map
(when ``arena testset build`` stored one); the flywheel's rounds (when the workspace has them);
a battle browser; tokens and cost.

The sections are HTML and SVG written here, readable without scripts. The battle browser is
one hand-written script (``assets/report.js``, inline) over data in
``<script type="application/json">`` blocks: a compact index parsed at load, and text chunks
parsed when a battle is opened. Small reports are one file; when the texts pass
``inline_limit`` bytes the chunks go to ``<name>_files/chunk-K.js`` beside the page, loaded on
demand by ``<script src>`` (which, unlike ``fetch``, works from ``file://``).

Everything from the workspace is data: markup is escaped (``html.escape``), the JSON blocks
escape ``<``, ``>`` and ``&``, and the script writes texts with ``textContent`` only. A
Content-Security-Policy lets only the report's own script run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArenaError
from ..flywheel_state import Delta, FlywheelState, RatedModel, RoundRow, load_state, state_path
from ..records import Battle, ExactCount, Prompt, Rating
from ..store import Store
from .browser import BrowserData, build_browser, json_for_html
from .charts import bars, ci_plot, esc, heatmap, line_chart, scatter
from .strengths import aimed_slices_html, strengths_html

if TYPE_CHECKING:
    from ..config import RunConfig

ASSETS = Path(__file__).resolve().parent / "assets"
INLINE_LIMIT = 8_000_000
"""Bytes of battle texts kept inside the page; above it they go to sidecar chunk files."""
GROUP_BOOTSTRAP = 100
"""Bootstrap rounds of the per-category and per-subset leaderboards (at most; the run's if fewer)."""
MAX_CLUSTER_COLUMNS = 12
"""Per-cluster boards join the table only up to this many clusters (``arena leaderboard --by cluster`` has all)."""

_e = esc


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def _table(headers: list[str], rows: list[list[str]], left: int = 1, attrs: str = "",
           row_attrs: list[str] | None = None) -> str:
    """Return an HTML table; ``rows`` hold already-escaped cell HTML; the first ``left`` columns align left."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        f"<tr{(' ' + row_attrs[k]) if row_attrs else ''}>"
        + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>"
        for k, r in enumerate(rows)
    )
    return f"<table{(' ' + attrs) if attrs else ''}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _ci(low: float | None, high: float | None) -> str:
    return f"{_num(low, 0)} .. {_num(high, 0)}" if low is not None and high is not None else "-"


def _load_config(store: Store) -> RunConfig:
    """Return the run's config; for a workspace only the flywheel wrote, its arena run of the models it rated."""
    from ..config import ModelSpec, validate_config
    from ..flywheel.settings import FlywheelConfig
    from ..pipeline import load_saved_config

    try:
        return load_saved_config(store)
    except ArenaError:
        saved = store.get_meta("flywheel_config")
        if not saved:
            raise
    fw = validate_config(saved, FlywheelConfig, f"the flywheel config saved in {store.root} (rerun `arena flywheel` "
                         "to refresh it)")
    models: list[str] = []
    for b in store.get_battles(fw.rating_judge.name):
        for m in (b.model_a, b.model_b):
            if m not in models:
                models.append(m)
    if len(models) < 2:
        raise ArenaError(f"{store.root} holds a flywheel with no rated models yet: run `arena flywheel` first")
    # the answers are in the store: the report asks no model anything
    return fw.arena_config([ModelSpec(name=m, engine="imported") for m in models], rating=True)


def build_report(workspace: str | Path, *, chunk_dir: str | None = None, inline_limit: int = INLINE_LIMIT
                 ) -> tuple[str, list[tuple[str, str]]]:
    """Return the report page of ``workspace`` and its sidecar files ([(name, text)], empty when inline).

    ``chunk_dir``: the folder name (relative to the page) the sidecar chunks are loaded from.
    """
    from ..pipeline import TEST_SET, stage_ratings, stage_style_control, usage

    root = Path(workspace)
    with Store(root, readonly=True) as store:
        cfg = _load_config(store)
        ratings = stage_ratings(cfg, store)
        battles = store.get_battles(cfg.judge.name)
        judgments = store.get_judgments(cfg.judge.name)
        prompts = store.get_prompts(TEST_SET)
        answers = store.get_answers()
        usage_rows = usage(cfg, store)
        judge_stats = {j.name: store.get_meta(f"judge_stats/{j.name}") for j in [cfg.judge, *cfg.judge.members]}
        cluster_map = store.get_meta("testset/cluster_map")
        per_cluster = store.get_meta("testset/per_cluster")
        from ..arena.canaries import stored_reports

        canaries = stored_reports(store, cfg.judge.name)
        preference = store.get_meta(f"self_preference/{cfg.judge.name}/{TEST_SET}") or []
        try:
            style = stage_style_control(cfg, store)
            style_note = ""
        except ArenaError as err:  # e.g. answers that never differ in style: say so, keep the report
            style, style_note = None, str(err)

    model_order = [r.model for r in ratings] + [m.name for m in cfg.models if m.name not in {r.model for r in ratings}]
    browser = build_browser(prompts, answers, judgments, battles, model_order)
    sections: list[tuple[str, str, str]] = []  # (id, title, html)

    # -- the run
    source = "the built-in task suite" if cfg.prompts is None else (cfg.prompts.set or cfg.prompts.path)
    groups = Counter(p.category or p.cluster or "-" for p in prompts)
    run = [f"<p>{len(prompts)} prompts from {_e(source)}; {len(cfg.models)} contestants; judge "
           f"<b>{_e(cfg.judge.name)}</b> ({_e(cfg.judge.kind)}"
           + (f", {_e(cfg.judge.template)}" if cfg.judge.kind == "llm" else "") + f"); schedule "
           f"{_e(cfg.battles.schedule)}; {len(battles)} battles; workspace <code>{_e(root)}</code>.</p>",
           _table(["category / cluster", "prompts"],
                  [[_e(g), str(n)] for g, n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))][:40])]
    failed = [w for c in canaries if (w := c.warning()) is not None]
    if failed:  # first thing on the page: these figures come from a judge that a canary fooled
        run.insert(0, "".join(f'<p class="warn" role="alert" style="color:#a40000"><b>Warning: {_e(w)}.</b></p>'
                              for w in failed))
    if canaries:
        run.append("<h3>Canaries</h3>" + _table(
            ["set", "check", "value", "95% CI", "games", "rule", "passed"],
            [[_e(c.set_name), _e(k.name), "-" if k.value is None else f"{k.value:.1f}%",
              "-" if k.ci_low is None else f"{k.ci_low:.1f}..{k.ci_high:.1f}", str(k.games), _e(k.rule),
              {True: "yes", False: "<b>no</b>", None: "-"}[k.passed]] for c in canaries for k in c.checks]))
    if preference:  # the judge shares a family with contestants: their win rate against the others
        run.append("<h3>Self-preference</h3>" + _table(
            ["judge", "family", "its family here", "battles against the others", "their win rate"],
            [[_e(sp["judge"]), _e(sp["family"]), _e(", ".join(sp["models"])), str(sp["battles"]),
              "-" if sp["win_rate"] is None else f"{sp['win_rate']:.1f}%"] for sp in preference]))
    from ..arena.manifest import board_manifest

    m = board_manifest(cfg, prompts, [c.as_dict() for c in canaries])
    jm = m["judge"]
    judge_text = ", ".join(f"{k} {v}" for k, v in jm.items() if k not in ("name", "members", "model"))
    if "model" in jm:
        judge_text += "; model " + ", ".join(f"{k} {v}" for k, v in jm["model"].items())
    run.append("<h3>Manifest</h3>" + _table(["what", "value"], [
        ["judge", _e(f"{jm['name']}: {judge_text}")],
        ["test set", _e(f"{m['test_set']['prompts']} prompts, {m['test_set']['turns']} turns, hash "
                        f"{m['test_set']['hash']}")],
        ["schedule", _e(", ".join(f"{k} {v}" for k, v in m["schedule"].items() if v is not None))],
        ["ratings", _e(", ".join(f"{k} {v}" for k, v in m["ratings"].items()))],
        ["program", _e(m["program"])]]))
    sections.append(("run", "The run", "".join(run)))

    # -- leaderboard
    r = cfg.ratings
    spent = {u["name"]: u for u in usage_rows if u["role"] == "contestant"}
    lb = [f'<p class="note">Bradley-Terry, scale 400, {"anchor " + _e(r.anchor) if r.anchor else "mean 1000"}; '
          f"95% intervals from {r.bootstrap} bootstrap rounds resampling {_e(r.resample)}s; rank CI is 1 + the "
          f"number of models whose lower bound is above this model's upper bound. Tokens and cost: every call "
          f"behind the model's answers to this test set.</p>"]

    def spend(m: str, key: str) -> str:
        u = spent.get(m)
        if u is None:
            return "-"
        if key == "cost":
            return f"${u['cost']:.4f}" if u["cost"] else "-"
        return f"{u[key]:,}"

    lb.append(_table(
        ["rank", "model", "rating", "95% CI", "rank CI", "wins", "losses", "ties", "battles", "tokens in",
         "tokens out", "cost"],
        [[str(x.rank or ""), _e(x.model), _num(x.rating), _ci(x.ci_low, x.ci_high), str(x.rank_ci or "-"),
          str(x.wins), str(x.losses), str(x.ties), str(x.battles), spend(x.model, "tokens_in"),
          spend(x.model, "tokens_out"), spend(x.model, "cost")] for x in ratings],
        left=2, attrs='id="leaderboard-table"', row_attrs=[f'data-model="{_e(x.model)}"' for x in ratings],
    ))
    lb.append(ci_plot([(x.model, x.rating, x.ci_low, x.ci_high) for x in ratings]))
    if cfg.battles.baseline and any(cfg.battles.baseline in (b.model_a, b.model_b) for b in battles):
        lb.append(_baseline_html(battles, cfg.battles.baseline, r.bootstrap, r.seed))
    sections.append(("leaderboard", "Leaderboard", "".join(lb)))
    human = _votes_html(root, ratings, cfg.ratings)
    if human:
        sections.append(("votes", "People's votes", human))

    # -- style control
    if style is None:
        st = f'<p class="note">Not fitted: {_e(style_note)}</p>'
    else:
        coefs = ", ".join(f"{_e(k)} {v:+.3f}" for k, v in style.coefficient_table().items())
        style_rows: list[dict[str, Any]] = style.to_rows()
        st = ('<p class="note">Contextual Bradley-Terry with the normalised differences of answer length, '
              "markdown headers, lists and bold as extra features (as Chatbot Arena does).</p>"
              + _table(["model", "rating", "controlled", "controlled 95% CI", "rank", "delta"],
                       [[_e(row["model"]), _num(row["rating"]), _num(row["rating_controlled"]),
                         _ci(row["ci_low_controlled"], row["ci_high_controlled"]),
                         f"{row['rank']} &rarr; {row['rank_controlled']}", f"{row['delta']:+.1f}"]
                        for row in style_rows])
              + f'<p class="note">Style coefficients (log-odds per SD; + means the judge prefers more): {coefs}</p>')
    sections.append(("style", "Style control", st))

    # -- win rates
    if battles:
        sections.append(("winrates", "Win rates", _win_rates(ratings, battles)))

    # -- per category / subset
    sections.append(("groups", "By category and subset", _group_boards(cfg, ratings, battles, prompts)))
    strengths = strengths_html(ratings, battles, prompts, bootstrap=min(r.bootstrap, GROUP_BOOTSTRAP), seed=r.seed)
    if strengths:
        sections.append(("strengths", "Strengths and weaknesses", strengths))
    scores = _scores_html(root, cfg)
    if scores:
        sections.append(("scores", "Scores (single-answer grading)", scores))
    if cfg.battles.baseline:
        sections.append(("lc", "Length-controlled win rate", _lc_html(root, cfg)))

    # -- judge
    jd = []
    for name, s in judge_stats.items():
        if s:
            jd.append(f"<p><b>{_e(name)}</b>: {s.get('requests', 0)} verdicts asked: {s.get('parsed', 0)} parsed, "
                      f"{s.get('retried', 0)} parsed after a retry, {s.get('failed', 0)} failed (kept with their raw "
                      f"text); {s.get('flagged', 0)} judgments with an answer that addresses the judge.</p>")
    if cfg.judge.kind == "verifier":
        jd.append('<p class="note">The verifier judge scores each answer alone and sees no order: its "first '
                  'shown" is the first model of each pair in config order, so position bias here measures the '
                  "contestants, not the judge.</p>")
    jd.append(_audit_html(root))
    sections.append(("judge", "Judge", "".join(jd)))

    # -- test set map
    if cluster_map and cluster_map.get("points"):
        sections.append(("testset", "Test set clusters", _cluster_html(cluster_map, per_cluster, prompts)))

    # -- flywheel
    fly = _flywheel_html(root)
    if fly:
        sections.append(("flywheel", "Flywheel rounds", fly))

    # -- battles
    sections.append(("battles", "Battles", _browser_shell(browser)))

    # -- usage
    sections.append(("usage", "Tokens and cost", _table(
        ["role", "model", "calls", "tokens in", "tokens out", "cost"],
        [[_e(u["role"]), _e(u["name"]), str(u["calls"]), str(u["tokens_in"]), str(u["tokens_out"]),
          f"${u['cost']:.4f}" if u["cost"] else "-"] for u in usage_rows], left=2)))

    return _page(cfg.name, sections, browser, chunk_dir, inline_limit)


def _page(name: str, sections: list[tuple[str, str, str]], browser: BrowserData, chunk_dir: str | None,
          inline_limit: int) -> tuple[str, list[tuple[str, str]]]:
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    js = (ASSETS / "report.js").read_text(encoding="utf-8")
    chunk_texts = [json_for_html(c) for c in browser.chunks]
    inline = chunk_dir is None or sum(len(t) for t in chunk_texts) <= inline_limit
    index = dict(browser.index)
    index["chunkDir"] = None if inline else chunk_dir
    script_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode()
    # Only the report's own script runs: inline by its hash, sidecar chunks from the page's folder.
    csp = (f"default-src 'none'; script-src 'sha256-{script_hash}' 'self'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    nav = "".join(f'<a href="#{sid}">{_e(title)}</a>' for sid, title, _ in sections)
    out = [f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
           f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
           f'<meta name="referrer" content="no-referrer"><meta name="viewport" content="width=device-width">'
           f"<title>Arena report: {_e(name)}</title><style>{css}</style></head><body>",
           f'<header><h1>Arena report: {_e(name)}</h1><nav>{nav}</nav></header><main>']
    for sid, title, body in sections:
        out.append(f'<section id="{sid}"><h2>{_e(title)}</h2>{body}</section>')
    out.append("</main>")
    out.append(f'<script type="application/json" id="arena-index">{json_for_html(index)}</script>')
    out.append(f"<script>{js}</script>")
    files: list[tuple[str, str]] = []
    if inline:
        for k, text in enumerate(chunk_texts):
            out.append(f'<script type="application/json" id="arena-chunk-{k}">{text}</script>')
    else:
        for k, text in enumerate(chunk_texts):
            files.append((f"chunk-{k}.js", f'arenaChunk("{browser.token}",{k},{text});\n'))
    out.append("</body></html>")
    return "\n".join(out), files


def _baseline_html(battles: list[Battle], baseline: str, bootstrap: int, seed: int) -> str:
    """Return arena-hard's headline: each model's win rate against the baseline with its bootstrap 95% CI."""
    from ..rating.baseline import baseline_win_rates

    rows = baseline_win_rates(battles, baseline, bootstrap=bootstrap, seed=seed)

    def pct(x: float | None) -> str:
        return _num(None if x is None else 100 * x)

    return (f'<p class="note">Win rate against <b>{_e(baseline)}</b> (arena-hard\'s headline; ties as half, '
            f"weighted battles counted by weight; 95% CI from {bootstrap} bootstrap rounds over prompts; "
            f"<code>arena leaderboard WS --baseline {_e(baseline)}</code>).</p>"
            + _table(["model", "win rate %", "95% CI %", "prompts"],
                     [[_e(x.model), pct(x.win_rate), f"{pct(x.ci_low)} .. {pct(x.ci_high)}", str(x.prompts)]
                      for x in rows], attrs='id="baseline-table"'))


def _win_rates(ratings: list[Rating], battles: list[Battle]) -> str:
    from ..rating.counts import BattleTable
    from ..rating.winrate import observed_win_matrix, predicted_win_matrix

    models, predicted = predicted_win_matrix(ratings)
    obs_models, observed, games = observed_win_matrix(BattleTable.from_battles(battles))
    idx = {m: i for i, m in enumerate(obs_models)}
    pred = [[float(predicted[i, j]) for j in range(len(models))] for i in range(len(models))]
    obs, cnt = [], []
    for a in models:
        row_o: list[float | None] = []
        row_c: list[int] = []
        for b in models:
            if a not in idx or b not in idx:
                row_o.append(None)
                row_c.append(0)
                continue
            n = int(games[idx[a], idx[b]])
            row_c.append(n)
            row_o.append(float(observed[idx[a], idx[b]]) if n else None)
        obs.append(row_o)
        cnt.append(row_c)
    return ('<p class="note">Row beats column, in percent: the chance predicted by the ratings, and the share of '
            "points the row actually took (ties count half); then the number of battles of each pair. Models are "
            "numbered by rank; hover a cell for the pair.</p><div class=\"charts\">"
            f'<figure><figcaption>predicted</figcaption>{heatmap(models, pred, label="predicted win rate")}</figure>'
            f'<figure><figcaption>observed</figcaption>{heatmap(models, obs, label="observed win rate")}</figure>'
            f'<figure><figcaption>battles</figcaption>'
            f'{heatmap(models, cnt, kind="count", fmt="count", label="battles per pair")}</figure></div>')


def _group_boards(cfg, ratings: list[Rating], battles: list[Battle], prompts: list[Prompt]) -> str:
    from ..rating.groups import group_battles, rate_groups

    columns: list[tuple[str, str, list[Battle]]] = []  # (kind, name, battles)
    subsets = group_battles(battles, prompts, "subset")
    from_testset = any(isinstance(p.meta.get("testset"), list) for p in prompts)
    if from_testset or len(subsets) > 1:
        columns.append(("subset", "mix (all)", battles))
        columns += [("subset", k, v) for k, v in subsets.items()]
    columns += [("category", k, v) for k, v in group_battles(battles, prompts, "category").items()]
    clusters = group_battles(battles, prompts, "cluster")
    if 1 < len(clusters) <= MAX_CLUSTER_COLUMNS:
        columns += [("cluster", k, v) for k, v in clusters.items()]
    if not columns:
        return '<p class="note">The test set has no categories, clusters or subsets.</p>'
    r = cfg.ratings
    boot = min(r.bootstrap, GROUP_BOOTSTRAP)
    opts = dict(anchor=r.anchor if r.anchor else None, anchor_rating=r.anchor_rating, bootstrap=boot,
                resample=r.resample, seed=r.seed)
    got, _ = rate_groups({(kind, name): bs for kind, name, bs in columns}, **opts)
    boards = [{x.model: x for x in got.get((kind, name), [])} for kind, name, _ in columns]
    head = ["model", *[f"{name} ({len(bs)})" for _, name, bs in columns]]
    rows = []
    for x in ratings:
        cells = [_e(x.model)]
        for board in boards:
            g = board.get(x.model)
            cells.append("-" if g is None else
                         f'{_num(g.rating)} <span class="rk">#{g.rank}</span><br><span class="ci">'
                         f"{_ci(g.ci_low, g.ci_high)}</span>")
        rows.append(cells)
    kinds = Counter(k for k, _, _ in columns)
    subset_note = ("test-set subsets (diverse / hard, from <code>arena testset build</code>)" if from_testset
                   else "sources (the ingested files)")
    note = (f'<p class="note">Bradley-Terry on each group\'s battles alone (number in the header), {boot} bootstrap '
            f"rounds; cell: rating, rank in the group, 95% CI. "
            + (f"{kinds['subset'] - 1} {subset_note}; " if kinds["subset"] else "")
            + (f"{kinds['category']} task categories; " if kinds["category"] else "")
            + (f"{kinds['cluster']} prompt clusters; " if kinds["cluster"] else "")
            + "the same boards in the terminal: <code>arena leaderboard WS --by category|cluster|subset</code>.</p>")
    return note + f'<div class="wide">{_table(head, rows)}</div>'


def _scores_html(root: Path, cfg) -> str:
    """Return the MT-Bench-style scores table when the run's judge grades answers alone (an LLM judge), else ""."""
    from ..arena.llm_judges import load_judge_spec
    from ..pipeline import stage_scores

    if cfg.judge.kind != "llm" or load_judge_spec(cfg.judge.template).mode != "single":
        return ""
    with Store(root, readonly=True) as store:
        try:
            name, rows = stage_scores(cfg, store, bootstrap=GROUP_BOOTSTRAP * 10, seed=cfg.ratings.seed)
        except ArenaError as err:
            return f'<p class="note">{_e(str(err))}</p>'
    turns = sorted({t for r in rows for t in r.turns})
    cats = sorted({c for r in rows for c in r.categories})

    def cell(c) -> str:
        return "-" if c is None else f'{_num(c.mean, 2)} <span class="ci">({c.n})</span>'

    head = ["model", "mean", "95% CI", *(f"turn {t}" for t in turns), "graded", "failed",
            *(cats if len(cats) > 1 else [])]
    body = [[_e(r.model), _num(r.mean, 2),
             f"{_num(r.ci_low, 2)} .. {_num(r.ci_high, 2)}" if r.ci_low is not None else "-",
             *(cell(r.turns.get(t)) for t in turns), str(r.graded), str(r.failed),
             *(cell(r.categories.get(c)) for c in (cats if len(cats) > 1 else []))] for r in rows]
    return (f'<p class="note">Grades of <b>{_e(name)}</b>, each answer judged alone (MT-Bench, 1-10): mean over '
            "every graded turn with a 95% CI (bootstrap over prompts), the mean of each turn and of each category "
            "(graded turns in brackets); failed: answers whose judgment failed, left without a grade. The same "
            "table in the terminal: <code>arena scores WS</code>.</p>"
            f'<div class="wide">{_table(head, body)}</div>')


def _lc_html(root: Path, cfg) -> str:
    """Return the raw and length-controlled win rates against the run's baseline (AlpacaEval 2)."""
    from ..pipeline import stage_lc_winrates

    with Store(root, readonly=True) as store:
        try:
            rows = stage_lc_winrates(cfg, store, cfg.battles.baseline)
        except ArenaError as err:
            return f'<p class="note">{_e(str(err))}</p>'

    def ci(lo: float | None, hi: float | None) -> str:
        return f"{_num(lo)} .. {_num(hi)}" if lo is not None and hi is not None else "-"

    body = [[_e(r.model), _num(r.lc_win_rate), ci(r.lc_low, r.lc_high), _num(r.win_rate), ci(r.win_low, r.win_high),
             str(r.battles), f"{r.avg_length:.0f}", f"{r.length_coef:+.2f}"] for r in rows]
    return (f'<p class="note">Win rate against <b>{_e(cfg.battles.baseline)}</b> in percent (ties half), raw and '
            "length-controlled as AlpacaEval 2 computes it: a logistic model of the judge's preference with terms "
            "for the model, the normalised length difference and the prompt's difficulty, predicted with no length "
            f"difference. 95% CIs by bootstrap over prompts; the reference's answers average "
            f"{rows[0].reference_avg_length:.0f} characters. The same table in the terminal: "
            "<code>arena lc-winrate WS</code>.</p>"
            + _table(["model", "LC win rate", "95% CI", "win rate", "95% CI", "battles", "avg length", "length coef"],
                     body))


def _cluster_html(cmap: dict[str, Any], per_cluster: list[dict[str, Any]] | None, prompts: list[Prompt]) -> str:
    points = cmap.get("points", [])
    names = sorted({str(p.get("cluster")) for p in points}, key=lambda s: (len(s), s))
    if per_cluster:
        names = [str(c["cluster"]) for c in per_cluster] + [n for n in names if n not in
                                                            {str(c["cluster"]) for c in per_cluster}]
    colour = {n: i for i, n in enumerate(names)}
    text = {p.id: " ".join(p.turns[0].split())[:120] for p in prompts}
    pts = [(float(p["x"]), float(p["y"]), colour.get(str(p.get("cluster")), 0), bool(p.get("selected")),
            f"{p.get('cluster')}: {text[p['id']]}" if p.get("id") in text else str(p.get("cluster")))
           for p in points if p.get("x") is not None and p.get("y") is not None]
    out = [f'<p class="note">{_e(cmap.get("method", "?"))} projection of the prompt embeddings '
           f"({len(pts)} of {cmap.get('n_total', len(pts))} cleaned prompts shown); bold points are in the test "
           "set (diverse + hard), faint ones were left out. Hover a point for its prompt.</p>",
           scatter(pts, names, label="test set cluster map")]
    samples: dict[str, list[str]] = defaultdict(list)
    for p in prompts:
        if p.cluster is not None and len(samples[str(p.cluster)]) < 3:
            samples[str(p.cluster)].append(" ".join(p.turns[0].split())[:140])
    if per_cluster:
        rows = []
        for c in per_cluster:
            name = str(c["cluster"])
            ex = samples.get(name) or ([c["example"]] if c.get("example") else [])
            sw = f'<span class="sw" style="background:{_swatch(colour.get(name, 0))}"></span>'
            rows.append([sw + _e(name), str(c.get("size", "")), str(c.get("diverse", "")), str(c.get("hard", "")),
                         str(c.get("mix", "")), _num(c.get("difficulty"), 2),
                         "<br>".join(f"<span class=\"sample\">{_e(s)}</span>" for s in ex)])
        out.append(_table(["cluster", "size", "diverse", "hard", "in test set", "difficulty", "sample prompts"],
                          rows, attrs='class="clusters"'))
        # the samples column reads best left-aligned
        out[-1] = out[-1].replace('<td class="">' + "<span class=\"sample\">", '<td class="l"><span class="sample">')
    return "".join(out)


def _swatch(i: int) -> str:
    from .charts import PALETTE

    return PALETTE[i % len(PALETTE)]


def _flywheel_html(root: Path) -> str:
    """Return the flywheel section from ``WORKSPACE/flywheel/state.json`` and its losses, or '' when absent.

    The state is read as records (``flywheel_state``; the flywheel package is not imported). A state
    that cannot be read is said in the section: the rest of the report stands.
    """
    fw = root / "flywheel"
    if not state_path(root).is_file():
        return ""
    try:
        state = load_state(state_path(root))
    except ArenaError as err:
        return f'<p class="note">The flywheel\'s state is not shown: {_e(err)}</p>'
    out: list[str] = []
    last = state.last_report
    evals = state.evaluations
    if last is not None and (last.rounds or last.references or last.base):
        rows: list[tuple[str, RatedModel | RoundRow]] = []
        if last.base:
            rows.append(("base: " + last.base.model, last.base))
        rows += [(f"round {x.round}: {x.model}", x) for x in last.rounds]
        rows += [("reference: " + x.model, x) for x in last.references]
        plot = [(n, x.rating, x.ci_low, x.ci_high) for n, x in rows if x.rating is not None]
        out.append('<p class="note">Rating with 95% CI of each round\'s model, the untrained base and the '
                   "references, rated together on the test set after the last round.</p>")
        out.append(ci_plot(plot, width=760, label="rating per round"))
        out.append(_table(
            ["round", "model", "rating", "95% CI", "SFT examples", "DPO pairs", "RM pairs", "train loss", "stages"],
            [[str(x.round), _e(x.model), _num(x.rating), _ci(x.ci_low, x.ci_high), str(x.sft_examples),
              str(x.dpo_pairs), str(x.rm_pairs), _num(x.train_loss, 4), _e(", ".join(x.stages))] for x in last.rounds],
            left=2))
    if last is not None:
        out.append(_flywheel_evidence(state))
    if len(evals) >= 2:
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for k, ev in enumerate(evals):
            for rt in ev.ratings:
                series[rt.model].append((float(k), float(rt.rating)))
        out.append('<p class="note">Ratings at each evaluation (x: evaluation number, after '
                   + _e("; ".join(f"{k}: {ev.after}" for k, ev in enumerate(evals))) + ").</p>")
        out.append(line_chart(list(series.items()), x_label="evaluation", y_label="rating",
                              label="ratings per evaluation"))
    if state.slices:
        out.append('<h3>Slices and decontamination</h3><p class="note">Each training slice\'s prompts, and what was '
                   "dropped from it before any answer: prompts whose text is a test prompt's, and near-copies of a "
                   "prompt of any test set in the workspace (MinHash, long shared n-grams, embeddings).</p>")
        out.append(_table(["slice", "prompts", "dropped as test", "near-copies", "stages"],
                          [[_e(name), str(rec.prompts), str(rec.dropped_as_test), _e(rec.near_line()),
                            _e(", ".join(st.key for st in state.stages.values() if st.slice == name) or "-")]
                           for name, rec in state.slices.items()], left=1))
        out.append(aimed_slices_html(state))
    harvested = [(s.key, sorted(s.by_model.items())) for s in state.stages.values() if s.by_model]
    if harvested:
        out.append('<h3>Data harvested per reference model</h3><p class="note">Training examples (SFT: the '
                   "reference answer the target lost to; DPO / RM: the chosen answer) each stage took from each "
                   "model.</p>")
        out.append(bars([(k, [(m, float(v)) for m, v in parts]) for k, parts in harvested],
                        label="data harvested per reference"))
        refs = sorted({m for _, parts in harvested for m, _ in parts})
        out.append(_table(["stage", *refs, "total"],
                          [[_e(k), *[str(dict(parts).get(m, 0)) for m in refs], str(sum(v for _, v in parts))]
                           for k, parts in harvested]))
    series_l = []
    for path in sorted(fw.glob("round-*/*/losses.json")):
        try:
            log = json.loads(path.read_text(encoding="utf-8")).get("log", [])
        except (OSError, ValueError, AttributeError):
            continue
        pts = [(float(e["step"]), float(e["loss"])) for e in log
               if isinstance(e, dict) and isinstance(e.get("loss"), (int, float))
               and isinstance(e.get("step"), (int, float))]
        if pts:
            series_l.append((f"{path.parent.parent.name}/{path.parent.name}", pts))
    if series_l:
        out.append('<h3>Training losses</h3><p class="note">The trainer\'s logged loss per step, per stage '
                   "(<code>flywheel/round-R/I-KIND/losses.json</code>).</p>")
        out.append(line_chart(series_l, x_label="step", y_label="loss", label="training losses"))
    if not out:
        return ""
    return "".join(out)


def _delta_html(d: Delta | None) -> str:
    if d is None:
        return "-"
    ci = "" if d.ci_low is None or d.ci_high is None else f" [{d.ci_low:+.0f}, {d.ci_high:+.0f}]"
    return f"{d.rating:+.1f}{ci}"


def _exact_html(e: ExactCount | None) -> str:
    if e is None:
        return "-"
    return f"{e.n}/{e.of}" + ("" if e.gained is None else f" (+{e.gained} &minus;{e.lost})")


def _flywheel_evidence(state: FlywheelState) -> str:
    """Return the paired deltas, exact answers per category and the verbosity watch of the last run ('' if none)."""
    last = state.last_report
    if last is None:
        return ""
    out: list[str] = []
    compared: list[tuple[str, Any]] = [(f"round {r.round}", r) for r in last.rounds]
    ends = {r.model for r in last.rounds}  # a round's last stage is that round's row already
    compared += [(s.key, s) for s in state.stages.values() if s.status == "done" and s.model not in ends]
    if any(x.delta_prev or x.delta_base or x.delta_best_ref for _, x in compared):
        out.append('<h3>Paired deltas</h3><p class="note">Each stage\'s and round\'s rating minus the model\'s it '
                   "started from, the base's and the best reference's, with the 95% CI of the difference over the "
                   "bootstrap rounds (each resamples the test prompts once and rates every model on it); P: share "
                   "of rounds rating the model above the one before. Exact: right answers (checker score 10), "
                   "gained and lost against the model before.</p>")
        out.append(_table(
            ["", "model", "vs model before", "P", "vs base", "vs best reference", "exact"],
            [[_e(label), _e(x.model), _delta_html(x.delta_prev),
              _num(x.delta_prev.p_better if x.delta_prev else None, 2), _delta_html(x.delta_base),
              _delta_html(x.delta_best_ref), _exact_html(x.exact)] for label, x in compared], left=2))
    heads: list[tuple[str, Any]] = [("start", last.base)] if last.base is not None and last.base.exact else []
    heads += [(f"round {r.round}", r) for r in last.rounds]
    cats = sorted({c for _, x in heads if x.exact for c in x.exact.per_category})
    if cats:
        out.append('<p class="note">Exact answers per category (gained and lost against the round before).</p>')
        out.append(_table(["category", *[n for n, _ in heads]],
                          [[_e(c), *[_exact_html(x.exact.per_category.get(c) if x.exact else None)
                                     for _, x in heads]] for c in cats]))
    watched: list[tuple[str, Any]] = [("start", last.base)] if last.base is not None else []
    watched += [(f"round {r.round}", r) for r in last.rounds] + [("reference", x) for x in last.references]
    if any(x.mean_chars is not None for _, x in watched):
        out.append('<h3>Verbosity watch</h3><p class="note">Mean answer length on the test set, and the rating '
                   "with answer style (length, markdown) controlled beside the plain one: a rating that rises only "
                   "without style control is bought with length.</p>")
        out.append(_table(["", "model", "chars", "tokens", "rating", "style-controlled", "95% CI"],
                          [[_e(label), _e(x.model), _num(x.mean_chars), _num(x.mean_tokens), _num(x.rating),
                            _num(x.style_rating), _ci(x.style_ci_low, x.style_ci_high)] for label, x in watched],
                          left=2))
    followed = [(label, x.model, line) for label, x in watched for line in (x.shortcuts or [])]
    if followed:
        out.append('<h3>Shortcuts</h3><p class="note">Categories where a model\'s answers follow a surface rule '
                   "(the first or second number, yes, no, a sort direction...): what it gets right there, the rule "
                   "gets right too.</p>")
        out.append(_table(["", "model", "category: rule"], [[_e(a), _e(b), _e(c)] for a, b, c in followed], left=3))
    return "".join(out)


def _browser_shell(browser: BrowserData) -> str:
    n = browser.index["n"]
    return (f'<p class="note">Every prompt and pair the judge looked at ({n:,}), in prompt order. Filter, then '
            "click a row: the prompt (all turns), both answers and each game the judge played (both orders) with "
            "its scores and explanation. Texts are shown as written, never interpreted.</p>"
            '<div id="bb" class="bb"><div class="bb-filters">'
            '<label>model <select id="bb-model1"><option value="-1">any</option></select></label>'
            '<label>against <select id="bb-model2"><option value="-1">any</option></select></label>'
            '<label>category <select id="bb-cat"><option value="-1">any</option></select></label>'
            '<label>outcome <select id="bb-outcome"><option value="any">any</option>'
            '<option value="decisive">a winner</option><option value="tie">tie</option>'
            '<option value="win">model wins</option><option value="loss">model loses</option>'
            '<option value="none">no verdict</option></select></label>'
            '<label>judge flags <select id="bb-flag"><option value="-1">any</option>'
            '<option value="0">none</option></select></label>'
            '<label>prompt <input id="bb-search" type="search" placeholder="text in the prompt"></label>'
            '</div><div class="bb-bar"><span id="bb-count"></span> <button id="bb-prev" type="button">&larr;</button>'
            ' <span id="bb-page"></span> <button id="bb-next" type="button">&rarr;</button></div>'
            '<table id="bb-table"><thead><tr><th>#</th><th class="l">prompt</th><th class="l">category</th>'
            '<th class="l">model A</th><th class="l">model B</th><th class="l">result</th><th>scores</th>'
            '<th class="l">flags</th></tr></thead><tbody id="bb-rows"></tbody></table>'
            '<div id="bb-detail" class="bb-detail" hidden></div>'
            '<noscript><p class="note">The battle browser needs JavaScript.</p></noscript></div>')


def _votes_html(root: Path, ratings: list[Rating], settings: Any) -> str:
    """Return the board of the workspace's votes beside the judge's (``arena leaderboard --judge human``), or ""."""
    from ..people.workspace import human_battles
    from ..rating.bt import RateOptions, leaderboard

    try:
        battles, found = human_battles(root)
    except ArenaError:  # no votes (or none rated): no section
        return ""
    human = {x.model: x for x in leaderboard(battles, RateOptions(**settings.model_dump()))}
    left = f"; left out, flagged: {', '.join(found.left_out)}" if found.left_out else ""
    note = (f'<p class="note">{len(found.rated)} votes by {len({v.voter for v in found.rated})} voter(s) '
            f'(<code>arena vote</code>), rated as the judge\'s battles are; both bad as a tie{_e(left)}.</p>')
    rows = [[_e(x.model), str(x.rank or ""), _num(x.rating), str(h.rank or "") if h else "-",
             _num(h.rating) if h else "-", _ci(h.ci_low, h.ci_high) if h else "-", str(h.battles) if h else "0"]
            for x in ratings for h in [human.get(x.model)]]
    return note + _table(["model", "judge rank", "judge rating", "people rank", "people rating", "95% CI", "votes"],
                         rows, attrs='id="votes-table"')


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


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def write_report(workspace: str | Path, path: str | Path | None = None, *, inline_limit: int = INLINE_LIMIT) -> Path:
    """Write the report of ``workspace`` (default ``WORKSPACE/report.html``) and return its path.

    When the battle texts pass ``inline_limit`` bytes they are written to ``<stem>_files/`` beside it.
    """
    target = Path(path) if path is not None else Path(workspace) / "report.html"
    chunk_dir = _SAFE_NAME.sub("_", target.stem) + "_files"
    page, files = build_report(workspace, chunk_dir=chunk_dir, inline_limit=inline_limit)
    folder = target.parent / chunk_dir
    if folder.is_dir():  # chunks of an earlier report: never mix them with this one's
        for old in folder.glob("chunk-*.js"):
            old.unlink()
        if not files:
            try:
                folder.rmdir()
            except OSError:
                pass
    if files:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files:
            (folder / name).write_text(text, encoding="utf-8")
    target.write_text(page, encoding="utf-8")
    return target
