"""The built-in verifiable task suite: seeded prompts with reference answers and their checkers.

Below both ``curate`` and ``arena``: generating test sets and judging answers use it; it uses neither.
Two versions: 1 (``suite.py``, the original nine categories) and 2 (``world.py``, the flywheel's
balanced world); ``shortcuts.py`` scores constant and positional policies on either.
"""

from .suite import (
    CATEGORIES,
    SUITES,
    check,
    check_date,
    check_exact,
    check_list,
    check_numeric,
    check_text,
    check_turns,
    generate_tasks,
    suite_categories,
)

__all__ = ["CATEGORIES", "SUITES", "check", "check_date", "check_exact", "check_list", "check_numeric", "check_text",
           "check_turns", "generate_tasks", "suite_categories"]
