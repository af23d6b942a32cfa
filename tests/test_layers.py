"""The layering: engines and tasks below curate and arena; no domain package imports the CLI or Typer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "arena_learning"
# package -> packages (of arena_learning) it must never import
FORBIDDEN = {
    "engines": {"arena", "curate", "rating", "report", "cli", "flywheel", "pipeline", "scale"},
    "tasks": {"arena", "curate", "engines", "rating", "report", "cli", "flywheel", "pipeline"},
    "curate": {"arena", "cli", "report", "flywheel", "pipeline"},
    "rating": {"arena", "curate", "engines", "cli", "report", "flywheel", "pipeline"},
    "arena": {"cli", "report", "flywheel", "pipeline", "curate"},
    "report": {"cli"},
    "flywheel": {"cli", "report"},
    "scale": {"cli", "report", "arena", "curate", "rating"},
}


def imports_of(path: Path) -> set[tuple[str, str]]:
    """Return (top-level module, first part inside arena_learning or '') of every import in ``path``."""
    rel = path.relative_to(PKG).parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update((alias.name.split(".")[0], "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                mod = node.module or ""
                first = mod.split(".")[0]
                inner = mod.split(".")[1] if first == "arena_learning" and "." in mod else ""
                out.add((first, inner))
            else:
                base = list(rel[: len(rel) - node.level])
                parts = base + (node.module.split(".") if node.module else [])
                if not parts:  # "from .. import x"
                    out.update(("arena_learning", alias.name) for alias in node.names)
                else:
                    out.add(("arena_learning", parts[0].removesuffix(".py")))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_domain_packages_respect_the_layers(package):
    bad = []
    for path in sorted((PKG / package).rglob("*.py")):
        for top, inner in imports_of(path):
            if top == "typer" or (top == "arena_learning" and inner in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(PKG)} imports {top}.{inner}".rstrip("."))
    assert not bad, "\n".join(bad)
