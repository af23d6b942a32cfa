"""The commands page, generated from the command line itself.

One source of truth: every command, argument and option of ``arena`` is declared once, in the Typer app
(``arena_learning.cli.main.app``); this module walks the command tree Typer builds from it
(``typer.main.get_command``: Typer's own Click, read through the objects it returns) and writes each
command's usage, help and a table of its parameters (type, default, help) as Markdown, so the docs never
describe an option a second time. ``docs/commands.md`` is its output; a test fails when the committed page
differs. Hidden options (deprecated spellings) are left out, as ``--help`` leaves them out.

    python -m arena_learning.cli.commands_reference            # write docs/commands.md
    python -m arena_learning.cli.commands_reference --check    # exit 1 when the page is out of date
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main

PAGE = Path(__file__).resolve().parents[3] / "docs" / "commands.md"
PROG = "arena"


def _escape(text: str) -> str:
    """Return ``text`` safe in Markdown prose: no HTML tags, no emphasis from a bare ``*``."""
    return text.replace("<", "&lt;").replace("*", "\\*")


def _cell(text: str) -> str:
    """Return ``text`` safe inside a Markdown table cell (one line, pipes escaped)."""
    return _escape(" ".join(text.split())).replace("|", "\\|")


def _paragraphs(text: str) -> list[str]:
    """Return a command's help as Markdown paragraphs (Click's ``\\b`` paragraphs kept line by line)."""
    out = []
    for block in text.strip().split("\n\n"):
        if block.startswith("\b"):
            out.append("```\n" + block.lstrip("\b").strip("\n") + "\n```")
        elif block.strip():
            out.append(_escape(" ".join(block.split())))
    return out


def _summary(cmd: Any, limit: int = 120) -> str:
    """Return a command's help in one line: its first paragraph, cut at a word within ``limit`` characters."""
    text = " ".join((cmd.short_help or cmd.help or "").strip().split("\n\n")[0].split())
    if len(text) <= limit:
        return text
    return text[:limit - 3].rsplit(" ", 1)[0] + "..."


def _is_flag(param: Any) -> bool:
    """Return whether ``param`` is an option that takes no value (``--json``, ``--strict/--no-strict``)."""
    return bool(getattr(param, "is_flag", False))


def _is_argument(param: Any) -> bool:
    """Return whether ``param`` is a positional argument (Click's ``param_type_name``)."""
    return bool(param.param_type_name == "argument")


def _is_group(cmd: Any) -> bool:
    """Return whether ``cmd`` holds subcommands."""
    return hasattr(cmd, "list_commands")


def _context(cmd: Any, name: str, parent: Any = None) -> Any:
    """Return a Click context for ``cmd`` (the context class its own Click makes), without parsing anything."""
    return cmd.context_class(cmd, info_name=name, parent=parent)


def _type(param: Any, ctx: Any) -> str:
    """Return a parameter's type as ``--help`` shows it (``path``, ``int range``, ``list[str]``); ``flag``: a flag."""
    if _is_flag(param):
        return "flag"
    return _cell(str(param.display_type(ctx)).strip("<>"))


def _default(param: Any) -> str:
    """Return a parameter's default as shown in the table (empty when it has none)."""
    if param.required:
        return "required"
    default: Any = param.default
    if callable(default) or default is None or default == () or default == []:
        return ""
    if _is_flag(param):
        if not param.secondary_opts:
            return "" if not default else "on"
        return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{d}`" for d in default)
    return f"`{default}`"


def _names(param: Any) -> str:
    """Return how a parameter is written on the command line: ``CONFIG``, ``--workspace``, ``-w``."""
    if _is_argument(param):
        return f"`{param.name.upper()}`"
    names = [*param.opts, *param.secondary_opts]
    return ", ".join(f"`{n}`" for n in names)


def _help(param: Any) -> str:
    """Return a parameter's help text (Typer keeps an argument's on the parameter too)."""
    return str(getattr(param, "help", None) or "")


def _walk(cmd: Any, ctx: Any) -> Iterator[tuple[Any, Any]]:
    """Yield every visible command below ``cmd`` (``cmd`` included), in the order ``--help`` lists them."""
    yield cmd, ctx
    if _is_group(cmd):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _walk(sub, _context(sub, name, ctx))


def _runs(cmd: Any) -> bool:
    """Return whether ``cmd`` runs by itself (a command, or a group that runs without a subcommand)."""
    return not _is_group(cmd) or bool(cmd.invoke_without_command)


def _anchor(path: str) -> str:
    """Return the heading anchor MkDocs gives ``## path`` (lower case, spaces as hyphens)."""
    return path.lower().replace(" ", "-")


def render() -> str:
    """Return the commands page: a table of every command, then each with its usage, help and parameters."""
    root = typer.main.get_command(_app())
    root_ctx = _context(root, PROG)
    commands = [(cmd, ctx) for cmd, ctx in _walk(root, root_ctx) if ctx is not root_ctx]
    lines = [
        "# Commands",
        "",
        "<!-- generated by `python -m arena_learning.cli.commands_reference` from the command line itself",
        "     (src/arena_learning/cli/): edit the commands' help there, then run it -->",
        "",
        "Every command of `arena` with every argument and option, generated from the command line itself;",
        "`--help` after any command prints the same. A mistake in the input (an unknown config key, a wrong type,",
        "a missing model file, an unknown engine) prints what is wrong and where, and exits with code 2.",
        "`--set key=value` (repeatable) overrides a field of the config a command reads, e.g.",
        "`--set tasks.n=90`; the keys are in the [config reference](reference/config.md).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for cmd, ctx in commands:
        if not _runs(cmd):
            continue  # a group that only holds subcommands: its subcommands have the rows
        path = ctx.command_path
        summary = _summary(cmd)
        lines.append(f"| [`{path}`](#{_anchor(path)}) | {_cell(summary)} |")
    for cmd, ctx in commands:
        lines += ["", f"## {ctx.command_path}", ""]
        if _runs(cmd):
            usage = cmd.get_usage(ctx).strip().removeprefix("Usage:").strip()
            lines += ["```", usage, "```", ""]
        for para in _paragraphs(cmd.help or ""):
            lines += [para, ""]
        params = [p for p in cmd.params if not getattr(p, "hidden", False)]
        if params:
            lines += ["| argument or option | type | default | what it does |", "|---|---|---|---|"]
            for p in params:
                lines.append(f"| {_names(p)} | {_type(p, ctx)} | {_default(p)} | {_cell(_help(p))} |")
        if _is_group(cmd):
            subs = [name for name in cmd.list_commands(ctx) if not (cmd.get_command(ctx, name) or cmd).hidden]
            lines += ["", "Subcommands: " + ", ".join(f"[`{name}`](#{_anchor(ctx.command_path + ' ' + name)})"
                                                      for name in subs) + "."]
        while lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"


def _app() -> typer.Typer:
    """Return the ``arena`` Typer app, every command registered."""
    from arena_learning.cli.main import app

    return app


def main(argv: list[str] | None = None) -> int:
    from ..config_reference import write_page

    return write_page(argv, render, PAGE, "arena_learning.cli.commands_reference", "the command line")

if __name__ == "__main__":
    sys.exit(main())
