"""Leaderboards by group of prompts: category, cluster or subset (``arena leaderboard --by``, the report).

The groups of a prompt:

- ``category``: ``Prompt.category`` (MT-Bench's writing/math/..., the task suite's kinds);
- ``cluster``: ``Prompt.cluster`` (the k-means cluster of ``arena testset build``), else the
  source's own topic label (arena-hard's ``cluster``, kept as ``meta["source_cluster"]``);
- ``subset``: the test-set halves the prompt was chosen for (``meta["testset"]``: diverse,
  hard; a prompt chosen by both is in both) when ``arena testset build`` made the set, else
  the ingest source label (``Prompt.source``: one per ingested file, e.g. ``mt_bench/question``).

A prompt with no value for the grouping is left out of every group (it still counts on the
overall board). Each group is rated on its own battles alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..errors import ArenaError
from ..records import Battle, Prompt, Rating

if TYPE_CHECKING:
    from .bt import RateOptions

GroupBy = Literal["category", "cluster", "subset"]
GROUP_BY: tuple[str, ...] = ("category", "cluster", "subset")
K = TypeVar("K", bound=Hashable)


def prompt_groups(prompt: Prompt, by: str) -> list[str]:
    """Return the names of the ``by`` groups ``prompt`` belongs to (empty: none)."""
    if by == "category":
        return [prompt.category] if prompt.category else []
    if by == "cluster":
        value = prompt.cluster if prompt.cluster is not None else prompt.meta.get("source_cluster")
        return [str(value)] if value not in (None, "") else []
    if by == "subset":
        halves = prompt.meta.get("testset")
        if isinstance(halves, list) and halves:
            return [str(h) for h in halves]
        return [prompt.source] if prompt.source else []
    raise ArenaError(f"cannot group by {by!r}: choose one of {', '.join(GROUP_BY)}")


def group_battles(battles: Sequence[Battle], prompts: Sequence[Prompt], by: str) -> dict[str, list[Battle]]:
    """Return group name -> its battles, groups sorted by name; battles of unknown prompts are left out."""
    of_prompt = {p.id: prompt_groups(p, by) for p in prompts}
    out: dict[str, list[Battle]] = {}
    for b in battles:
        for g in of_prompt.get(b.prompt_id, ()):
            out.setdefault(g, []).append(b)
    return dict(sorted(out.items()))


def rate_groups(groups: Mapping[K, Sequence[Battle]], options: RateOptions | None = None, **overrides: Any
                ) -> tuple[dict[K, list[Rating]], dict[K, str]]:
    """Return (group -> leaderboard of its battles, group -> why it has none).

    ``options`` and ``overrides`` go to ``bt.leaderboard`` (anchor, bootstrap, resample, seed, ...).
    A group that cannot be rated (one model, the anchor absent) is named with the reason, not raised.
    """
    from .bt import leaderboard

    boards: dict[K, list[Rating]] = {}
    skipped: dict[K, str] = {}
    for name, bs in groups.items():
        try:
            with warnings.catch_warnings():  # small groups often lack an exact optimum: the prior handles it
                warnings.simplefilter("ignore")
                boards[name] = leaderboard(bs, options, **overrides)
        except (ArenaError, ValueError) as err:
            skipped[name] = str(err)
    return boards, skipped


def group_boards(battles: Sequence[Battle], prompts: Sequence[Prompt], by: str, options: RateOptions | None = None,
                 **overrides: Any) -> tuple[dict[str, list[Rating]], dict[str, str]]:
    """Return (group -> leaderboard, group -> why it has none) of ``battles`` grouped ``by`` (see ``rate_groups``)."""
    groups = group_battles(battles, prompts, by)
    if not groups:
        raise ArenaError(f"no battle's prompt has a {by}: nothing to break down (see `arena leaderboard --help`)")
    return rate_groups(groups, options, **overrides)
