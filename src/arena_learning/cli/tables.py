"""The one leaderboard printer every command uses: rank, rank with CI, rating, 95% CI, W/L/T, battles."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rich import box
from rich.table import Table

from ..records import Rating
from .consoles import stdout_console


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def leaderboard_table(ratings: Sequence[Rating], title: str = "leaderboard",
                      extra: Mapping[str, Mapping[str, float]] | None = None, caption: str | None = None) -> Table:
    """Return ``ratings`` as a table; ``extra`` adds columns (column name -> model -> value), ``caption`` a line
    under it.

    "CI rank" is 1 + the number of models whose whole interval lies above this model's
    (Chatbot Arena's rank with confidence); "-" without a bootstrap.
    """
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                  caption=caption, caption_justify="left")
    width = max((len(r.model) for r in ratings), default=5)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("CI rank", justify="right", no_wrap=True)
    table.add_column("model", no_wrap=True, min_width=min(width, 60), overflow="fold")
    for col in ("rating", "95% CI", "wins", "losses", "ties", "battles", *(extra or {})):
        table.add_column(col, justify="right", no_wrap=True)
    for r in ratings:
        ci = f"{r.ci_low:.0f}..{r.ci_high:.0f}" if r.ci_low is not None and r.ci_high is not None else "-"
        cells = [str(r.rank or ""), "-" if r.rank_ci is None else str(r.rank_ci), r.model, f"{r.rating:.1f}", ci,
                 str(r.wins), str(r.losses), str(r.ties), str(r.battles)]
        cells += [fmt((extra or {})[name].get(r.model)) for name in extra or {}]
        table.add_row(*cells)
    return table


def print_leaderboard(ratings: Sequence[Rating], title: str = "leaderboard",
                      extra: Mapping[str, Mapping[str, float]] | None = None, caption: str | None = None) -> None:
    """Print the leaderboard table on stdout (results only; progress and warnings go to stderr)."""
    stdout_console().print(leaderboard_table(ratings, title, extra, caption))


def spend_table(spend: Mapping[str, object]) -> Table:
    """Return ``engines.spend.spend_summary``'s sums as one table: per model, per stage, per judge, in all."""
    caption = "USD: each call's usage at its model's prices when it was made (batch calls at the batch price)"
    if spend.get("unpriced"):
        caption += f"; {spend['unpriced']} calls recorded before prices were kept count tokens only"
    table = Table(title="spend", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                  caption=caption, caption_justify="left")
    table.add_column("per", no_wrap=True)
    table.add_column("name", no_wrap=True)
    for col in ("calls", "batch", "tok in", "tok out", "USD"):
        table.add_column(col, justify="right", no_wrap=True)

    def row(per: str, name: str, s: Mapping[str, float]) -> None:
        table.add_row(per, name, str(s["calls"]), str(s["batch_calls"]), str(s["tokens_in"]), str(s["tokens_out"]),
                      f"{s['usd']:.4f}")

    for per, key in (("model", "by_model"), ("stage", "by_stage"), ("judge", "by_judge")):
        groups = spend[key]
        assert isinstance(groups, Mapping)
        for name, sums in groups.items():
            row(per, name, sums)
    row("total", "", spend)  # type: ignore[arg-type]  # the summary's top level holds the total's sums
    return table
