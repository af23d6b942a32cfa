"""The layering: engines and tasks below curate and arena; the CLI and Typer only on top; printing (rich) only in
the CLI and the report; no import cycle anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "arena_learning"
# every package and top-level module of arena_learning, by the name an import gives it
PARTS = {p.name.removesuffix(".py") for p in PKG.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
PARTS -= {"__init__", "__main__"}
# package or top-level module -> packages and modules (of arena_learning) it must never import
FORBIDDEN = {
    "engines": {"arena", "curate", "rating", "report", "cli", "flywheel", "pipeline", "plan", "scale"},
    "tasks": {"arena", "curate", "engines", "rating", "report", "cli", "flywheel", "pipeline", "plan"},
    "curate": {"arena", "cli", "report", "flywheel", "pipeline", "plan"},
    "rating": {"arena", "curate", "engines", "cli", "report", "flywheel", "pipeline", "plan"},
    "arena": {"cli", "report", "flywheel", "pipeline", "plan", "curate"},
    "report": {"cli"},
    "flywheel": {"cli", "report"},
    "scale": {"cli", "report", "arena", "curate", "rating", "pipeline", "plan"},
    # the nouns and the workspace sit at the bottom: errors, records, config, store import (almost) nothing
    "errors": PARTS - {"errors"},
    "records": PARTS - {"records", "errors"},
    # engines: only under TYPE_CHECKING (engine_class's return type); engine classes are named, not imported
    "engine_kinds": PARTS - {"engine_kinds", "errors", "engines"},
    "config": PARTS - {"config", "errors", "engine_kinds", "records"},
    "store": PARTS - {"store", "errors", "records"},
    "readers": PARTS - {"readers", "errors", "records"},
    "progress": PARTS - {"progress"},
    # the stages: below the flywheel, the report, the planner and the CLI
    "pipeline": {"cli", "report", "flywheel", "plan", "scale"},
    "plan": {"cli", "report", "flywheel", "scale"},
    "offline_batch": {"cli", "report", "flywheel", "plan", "scale"},
}


def imports_of(path: Path, source: str | None = None) -> set[tuple[str, str]]:
    """Return (top-level module, first part inside arena_learning or '') of every import in ``path``.

    ``source`` stands for the file's text (a test's own code, as if it were that file).
    """
    rel = path.relative_to(PKG).parts
    out = set()
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
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
    paths = [PKG / f"{package}.py"] if (PKG / f"{package}.py").is_file() else sorted((PKG / package).rglob("*.py"))
    assert paths and all(p.is_file() for p in paths), f"{package} is neither a package nor a module of arena_learning"
    for path in paths:
        for top, inner in imports_of(path):
            if top == "typer" or (top == "arena_learning" and inner in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(PKG)} imports {top}.{inner}".rstrip("."))
    assert not bad, "\n".join(bad)


PRINTING = {"cli", "report"}
"""The packages that may import rich: the command line and the HTML report. The rest reports through
arena_learning.progress callbacks and returned records."""


def test_only_the_cli_and_the_report_import_rich():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        part = path.relative_to(PKG).parts[0].removesuffix(".py")
        if part in PRINTING:
            continue
        bad += [f"{path.relative_to(PKG)} imports rich" for top, _ in imports_of(path) if top == "rich"]
    assert not bad, "\n".join(bad)


def test_the_rich_ban_sees_imports_inside_functions_and_under_type_checking():
    # imports_of walks the whole tree: an import kept for an annotation, or made when a function runs, counts too
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rich.progress import Progress\n"
              "def f():\n    import rich.console\n")
    found = imports_of(PKG / "engines" / "calls.py", source)
    assert ("rich", "") in found and ("typing", "") in found


# ---- import cycles ---------------------------------------------------------------------

def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Return every import statement that can run: at module level and inside functions alike.

    Imports under ``if TYPE_CHECKING:`` are left out: they never run, so they cannot make a cycle.
    """
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Return module -> the modules of arena_learning that importing it (or calling into it) imports.

    ``from X import y`` reaches the module X.y when there is one, else X; a module inside a package
    also reaches the packages above it (their ``__init__`` runs first), except the importer's own
    and the package root (which imports nothing when loaded).
    """
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: list[str] = []
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets += [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        edges = set()
        for target in targets:
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                above = ".".join(parts[:i])
                if above in MODULES and above != name and not name.startswith(above + "."):
                    edges.add(above)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _describe(graph: dict[str, set[str]], found: list[list[str]]) -> str:
    return "\n".join(f"cycle: {' '.join(c)}\n" + "\n".join(f"  {a} -> {', '.join(sorted(graph[a] & set(c)))}"
                                                         for a in c) for c in found)


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]


def test_the_import_graph_sees_function_level_imports():
    graph = import_graph()
    # pipeline imports llm_judges inside make_judge only; the settings import difficulty at the top
    assert "arena_learning.arena.llm_judges" in graph["arena_learning.pipeline"]
    assert "arena_learning.curate.difficulty" in graph["arena_learning.curate.settings"]
    # a relative import of a package's name reaches its __init__; the root package is no edge
    assert "arena_learning.engines" in graph["arena_learning.arena.llm_judges"]
    assert "arena_learning" not in graph["arena_learning.pipeline"]


def test_no_import_cycle_anywhere_in_src():
    graph = import_graph()
    found = cycles(graph)
    assert not found, _describe(graph, found)


def test_the_command_line_starts_without_numpy():
    # every command pays for what the CLI imports at start-up; numpy (a tenth of it) is loaded by the commands
    # that compute with it (ratings, the adaptive schedule, baselines), not by `arena battle` or `arena --help`
    import subprocess
    import sys

    code = ("import sys, arena_learning.cli.main; "
            "print(sorted(m for m in ('numpy', 'scipy', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(PKG.parent), "PATH": ""})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_program_sets_the_collector_for_a_run_and_runs_the_cli():
    # `arena` and `python -m arena_learning` (both arena_learning.__main__:main): thresholds that do not walk a
    # run's heap hundreds of times, the imports' objects frozen, then the command line itself
    import subprocess
    import sys

    # (a command's own --help: `arena --help` alone lists the commands without importing them, tests/test_cli_listing)
    code = ("import gc, sys; sys.argv = ['arena', 'run', '--help']\n"
            "from arena_learning.__main__ import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n"
            "    print(e.code, gc.get_threshold(), gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(PKG.parent), "PATH": ""})
    assert "--workspace" in out.stdout, out.stdout + out.stderr
    assert out.stdout.strip().endswith("0 (50000, 20, 10) True"), out.stdout + out.stderr
