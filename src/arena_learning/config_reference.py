"""The config reference page, generated from the config classes' own field descriptions.

One source of truth: every key a YAML config takes is a pydantic field with a type, a default and a
``description``; this module writes them as Markdown tables (one per section, nested sections linked),
so the docs never describe a key a second time. ``docs/reference/config.md`` is its output; a test
fails when the committed page differs, and another when a field has no description.

    python -m arena_learning.config_reference            # write docs/reference/config.md
    python -m arena_learning.config_reference --check    # exit 1 when the page is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from arena_learning.config import RunConfig
from arena_learning.curate.settings import PoolConfig, TestsetConfig
from arena_learning.flywheel.settings import FlywheelConfig

# (title, class, the commands that read such a file, an example config)
CONFIGS: list[tuple[str, type[BaseModel], list[str], str]] = [
    ("Run config", RunConfig, ["arena run CONFIG", "arena answer CONFIG", "arena battle CONFIG", "arena plan CONFIG"],
     "examples/quickstart.yaml"),
    ("Flywheel config", FlywheelConfig, ["arena flywheel CONFIG", "arena plan CONFIG --flywheel"],
     "examples/flywheel.yaml"),
    ("Test set config", TestsetConfig, ["arena testset build CONFIG"], "examples/testset.yaml"),
    ("Pool config", PoolConfig, ["arena pool build CONFIG"], "examples/pool.yaml"),
]
PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "config.md"


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """Yield the pydantic models an annotation holds (``X``, ``list[X]``, ``dict[str, X]``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _type_name(annotation: Any) -> str:
    """Return a short, readable name of a field's type."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return "null" if annotation is type(None) else annotation.__name__
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]" if args else name
    return re.sub(r"\btyping\.", "", str(annotation))


def _default(field: Any) -> str:
    """Return the field's default as YAML would show it, or 'required'."""
    if field.default_factory is not None:
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return "(section)"
        value = factory()
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{value!r}`".replace("|", "\\|")


def _anchor(cls: type[BaseModel]) -> str:
    return cls.__name__.lower()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def undescribed(classes: list[type[BaseModel]] | None = None) -> list[str]:
    """Return ``Class.field`` for every field of the config classes that has no description."""
    out = []
    for cls in classes or _sections([c for _, c, _, _ in CONFIGS]):
        out += [f"{cls.__name__}.{name}" for name, f in cls.model_fields.items() if not (f.description or "").strip()]
    return out


def _sections(roots: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """Return the root classes and every section they nest, each once, in the order first met."""
    seen: list[type[BaseModel]] = []
    todo = list(roots)
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.append(cls)
        for f in cls.model_fields.values():
            todo += [m for m in _models_in(f.annotation) if m not in seen]
    return seen


def _table(cls: type[BaseModel]) -> list[str]:
    doc = (cls.__doc__ or "").strip()
    lines = [f"### {cls.__name__}", ""]  # its anchor: the name in lower case (_anchor)
    if doc:
        lines += [" ".join(doc.split("\n\n")[0].split()), ""]
    lines += ["| key | type | default | what it does |", "|---|---|---|---|"]
    for name, f in cls.model_fields.items():
        key = f.alias or name
        nested = list(_models_in(f.annotation))
        desc = _cell(f.description or "")
        if nested:
            desc += " " + ", ".join(f"[{m.__name__}](#{_anchor(m)})" for m in nested)
        lines.append(f"| `{key}` | {_type_name(f.annotation)} | {_default(f)} | {desc.strip()} |")
    return [*lines, ""]


def render() -> str:
    """Return the config reference page (Markdown)."""
    lines = [
        "# Config reference",
        "",
        "<!-- generated by `python -m arena_learning.config_reference` from the config classes' field",
        "     descriptions (src/arena_learning/config.py, flywheel/settings.py, curate/settings.py): edit those -->",
        "",
        "Every key a YAML config takes, with its type, default and effect. Unknown keys and wrong types are",
        "errors that name the key and the file; any key can be set on the command line with",
        "`--set dotted.key=value` (a list item by its index or its `name`: `--set models.judge.params.max_tokens=8`).",
        "",
    ]
    documented: set[type[BaseModel]] = set()
    for title, cls, commands, example in CONFIGS:
        read_by = ", ".join(f"`{c}`" for c in commands)
        lines += [f"## {title}", "", f"Read by {read_by}; example: `{example}`.", ""]
        for section in _sections([cls]):
            if section in documented:
                continue
            documented.add(section)
            lines += _table(section)
    return "\n".join(lines).rstrip() + "\n"


def write_page(argv: list[str] | None, render: Callable[[], str], page: Path, module: str, source: str) -> int:
    """Write a generated page (``--check``: exit 1 when it is out of date); the ``main`` of every page generator.

    ``module`` is the ``python -m`` name that writes it, ``source`` what the page is generated from.
    """
    ap = argparse.ArgumentParser(description=f"write {page.name} from {source}")
    ap.add_argument("--check", action="store_true", help=f"exit 1 when the page is not what {source} give")
    ap.add_argument("--out", type=Path, default=page)
    args = ap.parse_args(argv)
    text = render()
    current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
    if args.check:
        if current != text:
            print(f"{args.out} is out of date: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {'written' if current != text else 'up to date'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_page(argv, render, PAGE, "arena_learning.config_reference", "the config classes")

if __name__ == "__main__":
    sys.exit(main())
