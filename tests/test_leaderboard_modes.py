"""`arena leaderboard`'s modes: one typed object (cli.options.LeaderboardOptions) says which board is asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_learning.cli.options import LeaderboardOptions
from arena_learning.errors import ArenaError


def run_here() -> bool:
    return False


def imported_here() -> bool:
    return True


@pytest.mark.parametrize("options, mode", [
    (LeaderboardOptions(), "board"),
    (LeaderboardOptions(csv=Path("b.csv")), "board"),
    (LeaderboardOptions(by="category"), "groups"),
    (LeaderboardOptions(style_control=True), "style"),
    (LeaderboardOptions(style_control=True, csv=Path("b.csv")), "style"),
    (LeaderboardOptions(baseline="m"), "baseline"),
    (LeaderboardOptions(baseline="m", judge="j"), "baseline"),
    (LeaderboardOptions(judge="j", csv=Path("b.csv")), "judge"),
    (LeaderboardOptions(diff=("a", "b"), judge="j"), "diff"),
    (LeaderboardOptions(manifest=True, by="category", diff=("a", "b")), "manifest"),  # the manifest wins
])
def test_each_mode_and_the_options_that_go_with_it(options, mode):
    assert options.mode(run_here) == mode


def test_a_workspace_of_imported_judgments_shows_its_judges_board_unless_a_board_is_chosen():
    asked = []

    def imported() -> bool:
        asked.append(1)
        return True

    assert LeaderboardOptions().mode(imported) == "judge" and asked == [1]
    assert LeaderboardOptions(csv=Path("b.csv")).mode(imported) == "judge"
    assert LeaderboardOptions(by="category").mode(imported) == "groups"
    assert LeaderboardOptions(style_control=True).mode(imported) == "style"
    assert LeaderboardOptions(diff=("a", "b")).mode(imported) == "diff" and asked == [1, 1]  # asked only when open


@pytest.mark.parametrize("options, message", [
    (LeaderboardOptions(diff=("a", "b"), by="category"), "--diff compares two models: it goes without --by"),
    (LeaderboardOptions(diff=("a", "b"), csv=Path("b.csv")), "--diff compares two models"),
    (LeaderboardOptions(diff=("a", "b"), baseline="m"), "--diff compares two models"),
    (LeaderboardOptions(baseline="m", by="category"), "--baseline and --judge go without --by and --style-control"),
    (LeaderboardOptions(judge="j", style_control=True), "--baseline and --judge go without --by"),
    (LeaderboardOptions(by="category", csv=Path("b.csv")), "--by prints one board per group: it goes without"),
    (LeaderboardOptions(by="category", style_control=True), "--by prints one board per group"),
])
def test_options_that_ask_for_two_kinds_of_board_are_refused_with_what_goes_together(options, message):
    with pytest.raises(ArenaError, match=message):
        options.mode(imported_here)


def test_target_asks_for_the_gaps_of_a_model_per_group_and_needs_by():
    from arena_learning.cli.options import LeaderboardOptions
    from arena_learning.errors import ArenaError

    assert LeaderboardOptions(by="category", target="m").mode(lambda: False) == "gaps"
    for bad in (LeaderboardOptions(target="m"), LeaderboardOptions(by="category", target="m", style_control=True),
                LeaderboardOptions(by="category", target="m", baseline="b")):
        with pytest.raises(ArenaError, match="--target"):
            bad.mode(lambda: False)
