"""The built-in verifiable task suite: seeded prompts with reference answers and their checkers.

Below both ``curate`` and ``arena``: generating test sets and judging answers use it; it uses neither.
"""

from .suite import (
    CATEGORIES,
    check,
    check_exact,
    check_list,
    check_numeric,
    check_text,
    check_turns,
    generate_tasks,
)

__all__ = ["CATEGORIES", "check", "check_exact", "check_list", "check_numeric", "check_text", "check_turns",
           "generate_tasks"]
