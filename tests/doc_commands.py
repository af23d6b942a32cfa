"""The `arena ...` commands a Markdown page quotes, and the CLI command each one names.

Shared by the tests that keep the README and the docs site true to the CLI (``test_docs.py``,
``test_examples_scale.py``). A page writes commands as a reader types them (``arena run CONFIG -w WS``)
or as a synopsis (``arena leaderboard WS [--by category|cluster] [--json]``, ``arena run|answer CONFIG``);
both are reduced to the command's path and the options it uses.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Any

import typer

from arena_learning.cli import app


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Return (language, body) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def page_commands(path: Path) -> list[str]:
    """Return every `arena ...` command the page shows: in code blocks (continuations joined) and inline."""
    text = path.read_text(encoding="utf-8")
    out: list[str] = []
    for _, body in code_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = re.sub(r"^(\$ |\.venv/bin/|[\w./-]*/bin/)", "", line.strip())
            if line.startswith("arena "):
                out.append(re.sub(r"\s+#.*$", "", line))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    out += [m.replace("\\|", "|") for m in re.findall(r"`(arena [^`]+)`", prose)]
    return out


@functools.cache
def cli() -> Any:
    """Return the CLI as a click group (built once: typer builds it anew on every call)."""
    return typer.main.get_command(app)


def resolve(tokens: list[str]) -> tuple[Any, list[str]]:
    """Return (the click command ``tokens`` name, its path) by walking the CLI's groups."""
    cmd: Any = cli()
    path: list[str] = []
    for tok in tokens:
        sub = getattr(cmd, "commands", {}).get(tok)
        if sub is None:
            break
        cmd, path = sub, [*path, tok]
    return cmd, path


def split(line: str) -> list[str]:
    """Return the words of a command line after `arena` (shell quoting where it parses, else spaces)."""
    try:
        words = shlex.split(line)
    except ValueError:  # a synopsis with an apostrophe in it
        words = line.split()
    return words[1:]


def expand(line: str) -> list[tuple[list[str], set[str]]]:
    """Return (command path words, options used) for each command a line names (``run|answer`` names two).

    Synopsis brackets are dropped; an option is the part of a word before ``=``; the values a synopsis
    gives as alternatives (``--by category|cluster``) are values, not commands.
    """
    words = [w.strip("[]") for w in split(line)]
    words = [w for w in words if w and w not in ("...", "|", "/")]
    heads = words[0].split("|") if words else []
    out = []
    for head in heads:
        tokens = [head, *words[1:]]
        _, path = resolve(tokens)
        if len(path) == 1 and len(tokens) > 1 and "|" in tokens[1] and not tokens[1].startswith("-"):
            path = [*path, tokens[1].split("|")[0]]  # a group's subcommands as alternatives (testset build|...)
        used = {t.split("=", 1)[0] for t in tokens[len(path):] if t.startswith("-") and t not in ("-", "--")}
        out.append((path or [head], used))
    return out


def options(cmd: Any) -> set[str]:
    """Return every option spelling a click command takes (``--help`` included)."""
    return {"--help", *(o for p in cmd.params for o in (*p.opts, *p.secondary_opts))}
