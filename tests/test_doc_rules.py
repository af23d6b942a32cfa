"""The docs say what the product does, once: rules every page and example config is held to.

- The words of how the project was built (issue numbers, "the quiet machine", "today", a CPU model, an
  absolute path of one checkout) stay out of the README, the docs and the example configs' comments.
- A figure with a confidence interval (``+13.8 [+1, +31]``, ``1119..1183``) is written once, in the results
  log, and inserted by ``benchmarks/docs_tables.py``: outside a generated block, a page holding one fails.
- A page names only configs, commands, options, judge folders and pip extras that exist.
- The README's tables are what the generator writes from ``benchmarks/results.jsonl``; its config block plans;
  ``examples/README.md`` lists every config, and no two configs share a workspace name.
- A manual, not a notebook: every repository file, script and folder a page names is in the tree; every config key
  and value in a YAML block or an inline setting is one the config models take; every link to a heading finds it;
  every page's title is its nav entry; no dates, commits, machine words or measured figures in a page's prose or
  in the CLI's help; no paragraph over 120 words; each glossary word links to the glossary at its first use; a
  workspace a guide uses is made by a step before it; the layout page names every module; the API page's
  examples run. Each rule has a control that plants a case it must catch.

The results page (generated) and a page whose title says it is a record of experiments are out of the rules'
scope. Pages other helpers are rewriting are marked where they fail now (``KNOWN``), so the list of pages still
to fix is visible in every run (xfail, or xpass once fixed). Fast: no model runs.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
from pathlib import Path
from typing import Literal

import pytest
import tomllib
import yaml
from typer.testing import CliRunner

from arena_learning.arena.llm_judges import builtin_judges
from arena_learning.cli import app

from .conftest import load_benchmark
from .doc_commands import cli, code_blocks, expand, options, page_commands, resolve

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
runner = CliRunner()

GENERATED = re.compile(r"<!-- generated: .*?<!-- end generated -->", re.S)
OUTPUT_BLOCK = re.compile(r"^```text\n.*?^```$", re.S | re.M)


def _bench(name: str):
    return load_benchmark(name)


def _title(path: Path) -> str:
    return next((ln[2:] for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("# ")), "")


def _in_scope(path: Path) -> bool:
    """Whether the rules hold for the page: not the generated results page, not a record of experiments."""
    return path.name != "results.md" and not re.search(r"experiment", _title(path), re.I)


PAGES = [p for p in [README, ROOT / "examples" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] if _in_scope(p)]


def _comments(path: Path) -> str:
    """Return the comments of a YAML file, one per line (what a reader of the config reads as prose)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.search(r"(?:^|\s)#\s?(.*)$", line)
        if m:
            out.append(m[1])
    return "\n".join(out)


def _raw(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _text(name: str) -> str:
    """Return what the rules read of ``name``: a page without its generated blocks, or a config's comments."""
    path = ROOT / name
    if path.suffix == ".yaml":
        return _comments(path)
    return GENERATED.sub("", path.read_text(encoding="utf-8"))


# ---- the rules ---------------------------------------------------------------------------------------------------

BANNED = {
    r"\bissues? #?\d+": "an issue number",
    r"\bquiet machine\b": "'the quiet machine'",
    r"\btoday\b": "'today'",
    r"\bAMD EPYC\b": "a CPU model of one machine",
    r"/work/": "a path of one checkout",
    r"(?<![\w.~])/(?:[\w.+-]+/)+\.venv\b": "an absolute path to a .venv",
    r"\bthree other engineers\b": "'three other engineers'",
}


def banned_words(text: str) -> list[str]:
    """Return the words of how the project was built that ``text`` holds, each with what it is."""
    return [f"{m[0]!r} ({what})" for pattern, what in BANNED.items() for m in re.finditer(pattern, text, re.I)]


CI = [
    re.compile(r"[+-]?\d+(?:\.\d+)?\s*\[[+-]?\d+(?:\.\d+)?,\s*[+-]?\d+(?:\.\d+)?\]"),  # +13.8 [+1, +31]
    re.compile(r"\b(?:\d{3,}|\d+\.\d+)\.\.(?:\d{3,}|\d+\.\d+)\b"),  # 1119..1183 (not rounds 1..4, not D0..D8)
]


def ci_figures(text: str) -> list[str]:
    """Return the figures with a confidence interval typed into ``text``."""
    return [m[0] for pattern in CI for m in pattern.finditer(text)]


def _all_options() -> set[str]:
    out: set[str] = set()

    def walk(cmd) -> None:
        out.update(options(cmd))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(cli())
    return out


def _extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])


def _judge_names() -> set[str]:
    names = set(builtin_judges())
    return names | {n.rsplit("-v", 1)[0] for n in names}


# Options of other programs that pages name in prose (an `arena` option of the same spelling needs no entry).
OTHER_PROGRAMS = {
    "--dry-run": "benchmarks/gpu_check.py", "--cpu": "accelerate launch", "--num_machines": "accelerate launch",
    "--parallel": "llama.cpp's server",
    "--quick": "benchmarks/bench_judge_truth.py",
}


def missing_names(text: str, commands: list[str] | None = None) -> list[str]:
    """Return what ``text`` names that does not exist: configs, commands and options, judge folders, pip extras.

    ``commands`` are the page's quoted ``arena ...`` lines (``doc_commands.page_commands``); prose options are
    the inline code spans that start with ``--``.
    """
    out = [f"examples/{n} (no such config)" for n in re.findall(r"examples/([\w.-]+\.yaml)", text)
           if not (ROOT / "examples" / n).is_file()]
    for line in commands or []:
        for path, used in expand(line):
            cmd, found = resolve(path)
            if found != path:
                out.append(f"{line!r}: arena {' '.join(path)} is not a command")
            elif used - options(cmd):
                out.append(f"{line!r}: {sorted(used - options(cmd))} are not options of arena {' '.join(path)}")
    known = _all_options()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"`(--[\w-]*\w)(?![\w*-])", prose):
        if span not in known and span not in OTHER_PROGRAMS:
            out.append(f"`{span}` (no command takes it)")
    judges = _judge_names()
    for name in re.findall(r"\btemplate:\s*([\w./-]+)", text) + re.findall(r"\bjudges/([\w.-]+)", text):
        if name not in judges and "/" not in name and not name.startswith(("my-", "your")):
            out.append(f"judge {name!r} (built-in judges: {', '.join(sorted(builtin_judges()))})")
    extras = _extras()
    for group in re.findall(r"(?:\.|arena-learning)\[([\w,\s-]+)\]", text):
        out += [f"pip extra {e!r} (pyproject.toml has {', '.join(sorted(extras))})"
                for e in (x.strip() for x in group.split(",")) if e and e not in extras]
    return out


# ---- what a page names exists; what it says is a manual, not a notebook (issue's items 2 and 3) -------------------

# A repository path a page names: a top-level folder of the tree, then a path (in prose, inline code and links).
TREE_PATH = re.compile(r"(?<![\w./-])((?:benchmarks|examples|src|tests|docs|judges)/[\w./-]*[\w/])")


OTHER_SCRIPTS = {"show_result.py": "arena-hard-auto", "glm_winrate.py": "AlpacaEval"}


def missing_paths(text: str, page: Path | None = None) -> list[str]:
    """Return the repository files and folders ``text`` names that are not in the tree (a link is read from
    ``page``'s folder too)."""
    out = []
    for m in TREE_PATH.finditer(text):
        name = m[1].rstrip("/.")
        here = page.parent if page else ROOT
        if any(p.exists() for p in (ROOT / name, here / name, ROOT / "src" / "arena_learning" / name)):
            continue
        if re.search(r"[A-Z]{2,}|NAME|\bmy-|your", name):  # a placeholder (examples/NAME.yaml), not a file
            continue
        out.append(f"{name} (not in the tree)")
    scripts = {p.name for d in ("benchmarks", "tests", "src", "examples") for p in (ROOT / d).rglob("*.py")}
    for name in re.findall(r"(?<![\w/.-])([a-z]\w*\.py)\b", text):
        if name not in scripts and name not in OTHER_SCRIPTS and not name.startswith(("my_", "your_")):
            out.append(f"{name} (no such script in the tree)")
    for link in re.findall(r"\]\(([^)#\s]+\.(?:py|sh|yaml|jsonl|md|toml|txt))(?:#[^)]*)?\)", text):
        if "://" not in link and not ((page.parent if page else ROOT) / link).exists():
            out.append(f"{link} (a link to a file not in the tree)")
    return sorted(set(out))


def _config_models() -> list[type]:
    from pydantic import BaseModel

    from arena_learning import config
    from arena_learning.arena import llm_judges
    from arena_learning.curate import settings as curate_settings
    from arena_learning.flywheel import settings as flywheel_settings
    from arena_learning.scale import launch
    out = []
    for mod in (config, curate_settings, flywheel_settings, launch, llm_judges):
        out += [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, BaseModel)
                and c.__module__ == mod.__name__ and c.model_config.get("extra") == "forbid"]
    return out


def _models_in(annotation) -> list[type]:
    """Return the config models an annotation holds (``X``, ``X | None``, ``list[X]``, ``dict[str, X]``)."""
    import typing

    from pydantic import BaseModel
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def config_errors(data, model) -> list[str]:
    """Return the keys and values of ``data`` (a whole or partial section of ``model``) the config rejects.

    Keys are looked up in the model's fields, sections recursed into; a leaf value is validated against its
    field's type alone, so a snippet need not carry the section's required keys.
    """
    from pydantic import TypeAdapter, ValidationError
    if not isinstance(data, dict):
        return [f"{data!r} is not a {model.__name__} section"]
    out: list[str] = []
    fields = {(f.alias or k): f for k, f in model.model_fields.items()}
    for key, value in data.items():
        field = fields.get(key)
        if key == "...":
            continue  # a placeholder: {...}
        if field is None:
            out.append(f"{key}: not a key of {model.__name__}")
            continue
        subs = _models_in(field.annotation)
        if subs and isinstance(value, (dict, list)):
            items = (value if isinstance(value, list) else
                     list(value.values()) if all(isinstance(v, dict) for v in value.values()) and
                     not any(k in subs[0].model_fields for k in value) else [value])
            for item in items:
                tries = [config_errors(item, s) for s in subs] if isinstance(item, dict) else [[]]
                out += [f"{key}.{e}" for e in min(tries, key=len)]
            continue
        try:
            TypeAdapter(field.annotation).validate_python(value)
        except ValidationError as err:
            out.append(f"{key}: {value!r} rejected ({err.errors()[0]['msg']})")
        except Exception:
            pass
    return out


def yaml_config_errors(body: str) -> list[str]:
    """Return what a YAML block holds that no config model takes (the block is read as the section that fits it
    best: a whole config, or a part of one)."""
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError:
        return []  # not a config (a template with placeholders): the command checks read it
    if isinstance(data, list):
        return [e for item in data for e in yaml_config_errors(yaml.safe_dump(item))]
    if not isinstance(data, dict):
        return []
    tries = [config_errors(data, m) for m in _config_models() if m.model_fields]
    return min(tries, key=lambda errs: (sum("." not in e.split(":")[0] for e in errs), len(errs)))


INLINE_SETTING = re.compile(r"`([a-z_][\w.]*):\s+([^`{}\[\],#]+?)`")  # `allocate: learnable`, `mode: chat`
DOTTED = re.compile(r"--set\s+([a-z_][\w.]*)=|`([a-z_]+(?:\.[a-z_]+)+)=[^`]*`")
PLACEHOLDER_KEYS = {"key", "dotted.key"}  # --set tasks.n=90, `a.b=1`


# Inline `key: value` spans that are not config settings: what else a page shows in that form.
NOT_CONFIG_KEYS = {
    "decoding": "a ledger key's field", "stream": "an OpenAI request's field", "content": "a chat reply's field",
    "note": "the report's note", "c03": "a --names file's line", "sampler": "a ledger key's field",
    "selection": "the data-per-model table's column", "tensor_parallel_size": "vLLM's engine_args",
}


def _literals(annotation) -> set | None:
    """Return the values a Literal annotation (or a union holding only Literals, bools and None) allows."""
    import typing
    if typing.get_origin(annotation) is Literal:
        return set(typing.get_args(annotation))
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = [_literals(a) for a in args if a not in (type(None), bool)]
        if parts and all(p is not None for p in parts):
            return set().union(*parts) | ({None} if type(None) in args else set()) | (
                {True, False} if bool in args else set())
    return None


def _fields_named(key: str) -> list:
    return [f for m in _config_models() for k, f in m.model_fields.items() if (f.alias or k) == key]


def inline_config_errors(text: str) -> list[str]:
    """Return the inline `key: value` settings and dotted --set keys of ``text`` that no config takes."""
    out = []
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for key, value in INLINE_SETTING.findall(prose):
        if "." in key:
            continue
        fields = _fields_named(key)
        if key in NOT_CONFIG_KEYS:
            continue
        if not fields:
            out.append(f"`{key}: {value}`: no config has the key {key}")
            continue
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            continue
        if isinstance(parsed, str) and re.fullmatch(r"[A-Z_]+|[A-Z][\w-]*|\w+\.\.\.", parsed):
            continue  # a placeholder
        allowed = [_literals(f.annotation) for f in fields]
        if all(a is not None for a in allowed) and not any(parsed in a for a in allowed if a is not None):
            out.append(f"`{key}: {value}`: no config's {key} takes {value!r}")
    roots = [m for m in _config_models() if m.__name__ in ("RunConfig", "FlywheelConfig", "TestsetConfig",
                                                             "PoolConfig")]
    for a, b in DOTTED.findall(text):
        dotted = a or b
        if dotted in PLACEHOLDER_KEYS:
            continue
        if not any(_walk(dotted.split("."), r) for r in roots):
            out.append(f"{dotted}: no config has this key")
    return sorted(set(out))


def _walk(parts: list[str], model) -> bool:
    fields = {(f.alias or k): f for k, f in model.model_fields.items()}
    field = fields.get(parts[0])
    if field is None:
        return False
    if len(parts) == 1:
        return True
    subs = _models_in(field.annotation)
    if not subs:
        return False
    import typing
    rest = parts[1:]
    if typing.get_origin(field.annotation) is dict or any(typing.get_origin(a) is dict
                                                          for a in typing.get_args(field.annotation)):
        rest = rest[1:] or rest  # a dict's key (sweep: {seed1: ...})
    return any(_walk(rest, s) for s in subs) or any(_walk(parts[2:], s) for s in subs if len(parts) > 2)


def config_names(text: str) -> list[str]:
    """Return the config keys and values of ``text``'s YAML blocks and inline settings that the config rejects."""
    out = []
    for lang, body in code_blocks(text):
        if lang == "yaml" and not body.startswith("--8<--"):
            out += yaml_config_errors(body)
    return out + inline_config_errors(text)


def _slug(heading: str) -> str:
    from markdown.extensions.toc import slugify
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return slugify(text, "-")


def anchors(path: Path) -> set[str]:
    """Return the anchors a page's headings get on the site (Python-Markdown's toc, repeats numbered)."""
    seen: dict[str, int] = {}
    out = set()
    body = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", body, re.M):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}_{n}")
        seen[slug] = n + 1
    out |= set(re.findall(r'id="([\w-]+)"', body)) | set(re.findall(r"\{#([\w-]+)\}", body))
    return out


def broken_anchors(text: str, page: Path) -> list[str]:
    """Return the links of ``text`` (on ``page``) to a heading that the page they point to does not have."""
    out = []
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", prose):
        if "://" in target:
            continue
        dest = (page.parent / target).resolve() if target else page
        if dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
            out.append(f"{target}#{anchor} (no such heading)")
    return out


# A manual page says what to do and why; when, where and what was measured is the results page's.
NOTEBOOK = {
    r"\b20\d\d-[01]\d-[0-3]\d\b": "a date",
    r"(?<![\w/.:-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w-])": "a commit",
    r"\b\d+ (?:CPU )?cores?\b": "a machine's size",
    r"\b(?:AMD|EPYC|Xeon|Ryzen|Intel Core|Apple M\d)\b": "a CPU model",
    r"\b(?:a stray process|an idle machine|the machine it ran on|a quiet machine)\b": "a machine's state",
    r"(?<![\w.])\d+\.\d+\s?(?:s|ms|min|minutes|seconds|hours?|h|GB|MB|GiB|MiB)\b": "a measured time or size",
    r"(?<![\w.])\d+\.\d+\s?%": "a measured percentage",
    r"(?<![\w.])(?:x\d+\.\d+|\d+\.\d+x)\b": "a measured speed-up",
}
NOTEBOOK_EVERYWHERE = {"a date", "a commit", "a machine's size", "a CPU model", "a machine's state"}
# What the rule would read as a figure but is an instruction or a definition (a short list, reviewed by hand).
NOTEBOOK_ALLOWED = re.compile(r"\b0\.5 s\b")


def notebook_words(text: str) -> list[str]:
    """Return the dates, commits, machine words and measured figures of ``text``'s prose."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = re.sub(r"\]\([^)]*\)", "]", prose)  # a link's address (an anchor may name a date) is not prose
    prose = NOTEBOOK_ALLOWED.sub("", prose)
    said = re.sub(r"`[^`]+`", "", prose)  # a quoted message or option shows a command's form, not a result
    return [f"{m[0]!r} ({what})" for pattern, what in NOTEBOOK.items()
            for m in re.finditer(pattern, prose if what in NOTEBOOK_EVERYWHERE else said)]


MAX_WORDS = 120


def long_paragraphs(text: str) -> list[str]:
    """Return the opening words of each paragraph or list item of ``text`` longer than ``MAX_WORDS``."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)
    out = []
    for block in re.split(r"\n\s*\n", prose):
        if block.lstrip().startswith("|"):
            continue  # a table
        for item in re.split(r"\n(?=\s*(?:[-*]|\d+\.)\s)", block):
            words = len(item.split())
            if words > MAX_WORDS:
                out.append(f"{words} words: {' '.join(item.split()[:8])} ...")
    return out


def nav_titles() -> list[tuple[str, str]]:
    """Return (nav entry, page) for every page of mkdocs.yml's nav."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nplugins:")[0] + "\n" +
                         "nav:" + (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1])["nav"]
    out = []

    def walk(items) -> None:
        for item in items:
            for title, value in item.items():
                if isinstance(value, list):
                    walk(value)
                else:
                    out.append((title, value))

    walk(nav)
    return out


def title_mismatches(nav: list[tuple[str, str]]) -> list[str]:
    """Return each page whose own title differs from its nav entry (the home page's entry is Home)."""
    return [f"docs/{page}: nav says {title!r}, the page {_title(ROOT / 'docs' / page)!r}"
            for title, page in nav if page != "index.md" and _title(ROOT / "docs" / page).strip() != title.strip()]


# The glossary's words: a manual page links each to the glossary where it first uses it (the pattern finds a use).
GLOSSARY_TERMS = {
    "canaries": r"\bcanar(?:y|ies)\b", "ci-rank": r"\bCI ranks?\b", "slices": r"\bslices?\b",
    "teacher-ladder": r"\bteacher ladder\b", "the-flywheels-world": r"\bflywheel's world\b",
    "surface-rules": r"\bsurface (?:rules?|polic(?:y|ies))\b", "rest-em": r"\bReST-EM\b",
    "control-arm": r"\bcontrol arm\b", "per-cpu-family": r"\bper CPU family\b", "ledger": r"\bledger\b",
    "workspace": r"\bworkspaces?\b", "manifest": r"\bmanifests?\b", "task-suite": r"\btask suite\b",
    "verifier": r"\bverifier\b", "harvest": r"\bharvest(?:s|ed|ing)?\b", "style-control": r"\bstyle control\b",
    "aimed-slices": r"\baimed slices?\b", "paired-delta": r"\bpaired deltas?\b", "judge-folder": r"\bjudge folders?\b",
}
# Pages the rule leaves: the glossary itself, the generated pages and the record pages.
GLOSSARY_EXEMPT = {"docs/glossary.md", "docs/commands.md", "docs/reference/config.md"}


def _masked(text: str) -> tuple[str, list[tuple[int, int]]]:
    """Return ``text`` with what is not prose blanked (code, headings, comments, link addresses), same length,
    and the spans of link texts."""
    out = text

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m[0])

    for pattern in (r"<!-- generated: .*?<!-- end generated -->", r"<!--.*?-->", r"^```.*?^```"):
        out = re.sub(pattern, blank, out, flags=re.S | re.M)
    for pattern in (r"`[^`]+`", r"^#.*$", r"^!!!.*$", r"(?<=\])\([^)]*\)", r"https?://\S+", r"^--8<--.*$"):
        out = re.sub(pattern, blank, out, flags=re.M)
    links = [(m.start(), m.end()) for m in re.finditer(r"\[[^\]]*\]", out)]
    return out, links


def unlinked_terms(text: str) -> list[tuple[str, int, int]]:
    """Return (glossary anchor, start, end) of each glossary word whose first use in ``text`` links nowhere."""
    prose, links = _masked(text)
    out = []
    for anchor, pattern in GLOSSARY_TERMS.items():
        m = re.search(pattern, prose, re.I if anchor not in ("rest-em", "ci-rank") else 0)
        if m and not any(a <= m.start() < b for a, b in links):
            out.append((anchor, m.start(), m.end()))
    return out


def glossary_links(text: str) -> list[str]:
    """Return the glossary words whose first use in ``text`` is not a link (to the glossary or to their page)."""
    return [f"{text[a:b]!r} (first use; link it to glossary.md#{anchor})" for anchor, a, b in unlinked_terms(text)]

def _check(rule: str, name: str) -> list[str]:
    text = _text(name)
    if rule == "banned-words":
        return banned_words(text)
    if rule == "ci-figures":  # a guide's example output (a ```text block) shows a command's shape, not a result
        return ci_figures(OUTPUT_BLOCK.sub("", text))
    path = ROOT / name
    if rule == "names":
        return missing_names(text, [] if path.suffix == ".yaml" else page_commands(path))
    if path.suffix == ".yaml":
        return []  # the configs themselves are loaded by test_docs.py; the rules below read pages
    if rule == "paths":
        return missing_paths(text, path)
    if rule == "config":
        return config_names(text)
    if rule == "anchors":
        return broken_anchors(text, path)
    if rule == "notebook":
        return notebook_words(text)
    if rule == "paragraphs":
        return long_paragraphs(text)
    if rule == "glossary":
        return [] if name in GLOSSARY_EXEMPT else glossary_links(_raw(name))
    raise ValueError(rule)


RULES = ("banned-words", "ci-figures", "names", "paths", "config", "anchors", "notebook", "paragraphs", "glossary")
TARGETS = [str(p.relative_to(ROOT)) for p in PAGES] + [str(e.relative_to(ROOT)) for e in EXAMPLES]

# Pages that break a rule now, each being rewritten: each fails its rule as an expected failure until it is fixed
# (then it shows as XPASS: remove it from here).
KNOWN: dict[tuple[str, str], str] = {}


def _cases():
    for target in TARGETS:
        for rule in RULES:
            reason = KNOWN.get((target, rule))
            marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
            yield pytest.param(target, rule, id=f"{target}:{rule}", marks=marks)


@pytest.mark.parametrize(("target", "rule"), list(_cases()))
def test_every_page_and_example_keeps_the_rule(target, rule):
    found = _check(rule, target)
    assert not found, f"{target} breaks the rule {rule!r}: {found}"


def test_the_rules_catch_what_they_are_for():
    """The controls: each rule finds a planted case, and leaves the look-alikes that are not one."""
    assert banned_words("as in issue 35, on the quiet machine today") and banned_words("/home/me/arena/.venv/bin/x")
    assert not banned_words(".venv/bin/arena flywheel examples/flywheel.yaml, the issues page")
    assert ci_figures("round 4 against it +13.8 [+1, +31]") == ["+13.8 [+1, +31]"]
    assert ci_figures("rating 1151.8 (1119..1183)") == ["1119..1183"]
    assert not ci_figures("slices D0..D8, rounds 1..4, loss_weights: [1.0, 1.0]")
    assert missing_names("run examples/no-such.yaml with `--no-such-option`, template: no-such-judge, "
                         "pip install -e '.[dev,no-such-extra]'", ["arena leaderbored WS", "arena run C --nope"]) == [
        "examples/no-such.yaml (no such config)",
        "'arena leaderbored WS': arena leaderbored is not a command",
        "'arena run C --nope': ['--nope'] are not options of arena run",
        "`--no-such-option` (no command takes it)",
        f"judge 'no-such-judge' (built-in judges: {', '.join(sorted(builtin_judges()))})",
        "pip extra 'no-such-extra' (pyproject.toml has " + ", ".join(sorted(_extras())) + ")",
    ]
    assert not missing_names("examples/flywheel.yaml `--measure` template: arena-hard judges/pairwise-v1 "
                             ".[dev,ray,models,docs]", ["arena plan examples/flywheel.yaml --flywheel --measure"])


def unlisted_modules(layout: str, package: Path) -> list[str]:
    """Return the packages and modules under ``package`` that the layout page's tree does not name."""
    (tree,) = [b for _, b in code_blocks(layout) if "src/arena_learning/" in b][:1]
    named = set(re.findall(r"[\w.-]+/?", tree))
    out = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or path.name == "__init__.py" or len(rel.parts) > 2:
            continue
        if rel.parts[0] in ("judges", "assets") or (len(rel.parts) == 2 and not path.name.endswith(".py")
                                                     and path.name not in ("assets", "accelerate_configs")):
            continue
        name = f"{path.name}/" if path.is_dir() else path.name
        if (path.is_dir() or path.suffix == ".py") and name not in named:
            out.append(str(rel) + ("/" if path.is_dir() else ""))
    return out


def test_the_layout_page_names_every_package_and_module():
    package = ROOT / "src" / "arena_learning"
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    assert not unlisted_modules(layout, package)
    assert unlisted_modules(layout.replace(" gaps.py", " "), package) == ["rating/gaps.py"]  # the control


CREATES = re.compile(r"arena (?:run|flywheel|answer|battle|import-answers|ingest|testset build|pool build)\b[^`\n]*")


def _creates(block: str, workspace: str, seen: frozenset[Path] = frozenset()) -> bool:
    """Whether ``block`` (with what a page says before it) makes ``workspaces/NAME``: a command that writes it, a
    config it names whose workspace it is, or a link to a guide that makes it."""
    name = workspace.removeprefix("workspaces/")
    if any(workspace in m[0] for m in CREATES.finditer(block)):
        return True
    for config in re.findall(r"examples/([\w.-]+\.yaml)", block):
        path = ROOT / "examples" / config
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        if isinstance(data, dict) and (data.get("workspace") == workspace or
                                       (data.get("name") == name and "workspace" not in data)):
            return True
    for link in re.findall(r"\]\(([\w./-]+\.md)\)", block):
        guide = (GUIDES / link).resolve()
        if guide.is_file() and guide not in seen and guide.parent == GUIDES:
            if _creates(guide.read_text(encoding="utf-8"), workspace, seen | {guide}):
                return True
    return False


GUIDES = ROOT / "docs" / "guides"


def unmade_workspaces(text: str) -> list[str]:
    """Return the workspaces a guide uses that neither a step before their first use nor that paragraph makes."""
    out = []
    for name in dict.fromkeys(re.findall(r"workspaces/[\w.-]*\w", text)):
        at = text.index(name)
        end = text.find("\n\n", at)
        if not _creates(text[:end if end >= 0 else len(text)], name):
            out.append(f"{name} (no step before it makes it)")
    return out


@pytest.mark.parametrize("guide", sorted(p.name for p in GUIDES.glob("*.md")))
def test_every_workspace_a_guide_uses_is_made_by_a_step_before(guide):
    assert not unmade_workspaces((GUIDES / guide).read_text(encoding="utf-8"))


def test_the_workspace_rule_catches_a_workspace_no_step_makes():
    assert unmade_workspaces("Read it:\n\n```sh\narena leaderboard workspaces/nowhere\n```\n") == [
        "workspaces/nowhere (no step before it makes it)"]
    assert not unmade_workspaces("```sh\narena ingest a.jsonl --out workspaces/mine\narena leaderboard "
                                 "workspaces/mine\n```\n\nThe run of `arena flywheel examples/flywheel.yaml` "
                                 "(`workspaces/flywheel`); [the endpoints' run](rate-endpoints.md) "
                                 "(`workspaces/rate-endpoints`).")


def test_every_page_has_the_title_of_its_nav_entry():
    assert not title_mismatches(nav_titles())


def _help_texts() -> list[tuple[str, str]]:
    out = []

    def walk(cmd, path: str) -> None:
        out.append((path, cmd.help or ""))
        out.extend((f"{path} {'/'.join(p.opts)}", getattr(p, "help", None) or "") for p in cmd.params)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(cli(), "arena")
    return out


def test_the_clis_help_carries_no_dates_machines_or_measured_figures():
    found = [f"{where}: {w}" for where, text in _help_texts() for w in notebook_words(text) + banned_words(text)]
    assert not found, found


def test_the_manual_rules_catch_what_they_are_for(tmp_path):
    """The controls of the rules of a manual: each finds a planted case and leaves its look-alikes."""
    page = ROOT / "docs" / "x.md"
    assert missing_paths("run `python benchmarks/bench_gone.py` or bench_old.py; see examples/gone.yaml, [it](gone.md)",
                         page) == ["bench_old.py (no such script in the tree)",
                                   "benchmarks/bench_gone.py (not in the tree)", "examples/gone.yaml (not in the tree)",
                                   "gone.md (a link to a file not in the tree)"]
    assert not missing_paths("`benchmarks/bench_aim.py`, judges/pairwise-v1, examples/NAME.yaml, [i](install.md), "
                             "arena-hard-auto's show_result.py", page)
    assert config_names("```yaml\njudge: {kind: llm, tempalte: pairwise}\n```\n") == [
        "judge.tempalte: not a key of JudgeConfig"]
    assert config_names("```yaml\nbattles: {schedule: roundrobin}\n```\n")
    assert config_names("set `allocate: greedy` or `--set training.sft.sed=1`") == [
        "`allocate: greedy`: no config's allocate takes 'greedy'", "training.sft.sed: no config has this key"]
    assert not config_names("```yaml\njudge: {kind: llm, template: pairwise, model: {...}}\nbattles: {schedule: "
                            "baseline, baseline: b}\n```\n`allocate: even`, `--set training.sft.seed=1`, "
                            "`mode: chat`, `launcher: inprocess`")
    (tmp_path / "a.md").write_text("# A page\n\n## Its part\n\n## Its part\n", encoding="utf-8")
    assert anchors(tmp_path / "a.md") == {"a-page", "its-part", "its-part_1"}
    assert broken_anchors("[x](a.md#its-part) [y](a.md#its-part_1) [z](a.md#no-part)", tmp_path / "b.md") == [
        "a.md#no-part (no such heading)"]
    assert title_mismatches([("Install", "install.md")]) == [
        f"docs/install.md: nav says 'Install', the page {_title(ROOT / 'docs' / 'install.md')!r}"]
    assert notebook_words("measured on 2026-12-04 at 6679ad1 on 2 cores (AMD EPYC, a Xeon): 9.1 s, 87.2%, 1.21x") == [
        "'2026-12-04' (a date)", "'6679ad1' (a commit)", "'2 cores' (a machine's size)", "'AMD' (a CPU model)",
        "'EPYC' (a CPU model)", "'Xeon' (a CPU model)", "'9.1 s' (a measured time or size)",
        "'87.2%' (a measured percentage)", "'1.21x' (a measured speed-up)"]
    assert not notebook_words("a 95% CI, `--timeout 0.5 s`, [the record](results.md#table-flywheel-2026-12-05), "
                              "seed 1234567, sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    assert notebook_words("```\ngit show 6679ad1:benchmarks/x.py\n```\n") == []  # commands: the paths rule
    assert notebook_words("a message such as `flip rate 100.0% of 6 games`; `git show 6679ad1:x.py`") == [
        "'6679ad1' (a commit)"]
    assert glossary_links("The ledger keeps calls; the ledger again.") == [
        "'ledger' (first use; link it to glossary.md#ledger)"]
    assert not glossary_links("`ledger` in code, then the [ledger](glossary.md#ledger) and the ledger; [The workspace\n"
                              "and its files](workspace.md) and a workspace; ```\nslices\n```")
    assert long_paragraphs(" ".join(["word"] * 121) + "\n\n" + " ".join(["word"] * 120)) == [
        "121 words: word word word word word word word word ..."]
    assert not long_paragraphs("- " + " ".join(["w"] * 100) + "\n- " + " ".join(["w"] * 100) + "\n\n| " +
                               " ".join(["w"] * 200))


# ---- the README: a map, its tables generated ---------------------------------------------------------------------


def test_the_readme_is_a_short_map_whose_tables_are_generated():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 115, "README.md is a map: move detail into docs/"
    blocks = re.findall(r"<!-- generated: ([\w-]+)", text)
    assert blocks == ["arena-quickstart", "flywheel-quickstart", "requirements"]
    assert "2407.10627" in text  # the paper it implements


def test_the_readmes_tables_are_what_the_results_log_gives():
    tables = _bench("docs_tables")
    assert tables.stale() == [], "a page's generated tables are out of date: run python benchmarks/docs_tables.py"


def test_a_new_record_changes_the_table_it_feeds(tmp_path):
    """The flywheel slot shows the quickstart's own table once recorded (none before the config changed), else
    the ladder's; the requirements table takes each run's latest figures."""
    results, tables = _bench("results"), _bench("docs_tables")
    log = tmp_path / "results.jsonl"
    page = ROOT / "README.md"
    text = (f"{tables.opening('flywheel-quickstart')}\nold\n<!-- end generated -->\n"
            f"{tables.opening('requirements')}\n<!-- end generated -->\n")

    def add(figure: str, value: float, unit: str, note: str, date: str) -> None:
        fig = results.measured(figure, value, unit, "higher", "arena flywheel examples/flywheel.yaml", note)
        results.append(dataclasses.replace(fig, date=date), log)

    ladder = " round   exact\n     3   97/288\n\nwhat follows is not shown"
    add("flywheel_ladder.table", 97, "of 288", ladder, "2026-12-05")
    add("flywheel_quickstart.table", 46, "of 288", " round   exact\n     4   46/288", "2026-12-04")  # the old config
    add("flywheel_quickstart.minutes", 17, "min", "", "2026-12-04")
    out = tables.render(text, page, log)
    assert "97/288" in out and "46/288" not in out and "not shown" not in out and "\nold\n" not in out
    assert "| the flywheel quickstart | `arena flywheel examples/flywheel.yaml` | - | - | - |" in out
    add("flywheel_quickstart.table", 82, "of 288", " round   exact\n     2   82/288", "2026-12-06")
    add("flywheel_quickstart.minutes", 21.5, "min", "", "2026-12-06")
    add("flywheel_quickstart.peak_rss_gb", 12.0, "GB", "", "2026-12-06")
    out = tables.render(text, page, log)
    assert "82/288" in out and "97/288" not in out and "`arena flywheel examples/flywheel.yaml`, 2 cores" in out
    assert "| 22 min | 12 GB | - |" in out
    assert "(docs/results.md#current-figures)" in out
    nested = tables.render(text, ROOT / "docs" / "guides" / "x.md", log)
    assert "(../results.md#current-figures)" in nested
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        tables.render("<!-- generated: nope -->\n<!-- end generated -->\n", page, log)


def test_the_cost_table_shows_the_latest_estimate_of_each_judge(tmp_path):
    results, tables = _bench("results"), _bench("docs_tables")
    log = tmp_path / "results.jsonl"
    page = ROOT / "docs" / "guides" / "x.md"
    text = f"{tables.opening('hosted-costs')}\n<!-- end generated -->\n"
    out = tables.render(text, page, log)
    assert "| a small hosted judge | - | - | - |" in out  # nothing recorded yet

    def add(figure: str, value: float, date: str) -> None:
        note = "judge gpt-4o-mini at $0.15 / $0.6 per million tokens in / out (list prices)"
        results.append(dataclasses.replace(results.measured(figure, value, "USD", "lower", "arena plan X", note),
                                           date=date), log)

    add("hosted_cost.small_judge.usd", 4.0, "2026-12-01")
    add("hosted_cost.small_judge.usd", 3.55, "2026-12-07")
    add("hosted_cost.small_judge.usd_batch", 1.77, "2026-12-07")
    out = tables.render(text, page, log)
    assert "| a small hosted judge (`gpt-4o-mini`) | $0.15 / $0.6 | $3.55 | $1.77 |" in out
    assert "| a large hosted judge | - | - | - |" in out and "Estimates of list prices" in out


def test_a_config_block_is_the_example_file_whole(tmp_path):
    """A guide's complete config is generated from examples/: the file as it is, in a YAML block; a stale block or
    an unknown config is caught."""
    tables = _bench("docs_tables")
    page = ROOT / "docs" / "guides" / "x.md"
    text = f"{tables.opening('config-quickstart')}\nstale\n<!-- end generated -->\n"
    out = tables.render(text, page, tmp_path / "none.jsonl")
    body = (ROOT / "examples" / "quickstart.yaml").read_text(encoding="utf-8")
    assert out == f"{tables.opening('config-quickstart')}\n```yaml\n{body}```\n<!-- end generated -->\n"
    assert "from examples/quickstart.yaml" in out and "stale" not in out
    with pytest.raises(ValueError, match="no example config examples/nope.yaml"):
        tables.render("<!-- generated: config-nope -->\n<!-- end generated -->\n", page, tmp_path / "none.jsonl")


def test_the_api_pages_examples_run_one_per_module_it_documents(tmp_path, monkeypatch, capsys):
    """docs/reference/api.md: each module it documents (``::: module``) comes after a Python example, and the
    examples run in order as one script."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    sections = re.split(r"^::: [\w.]+$", text, flags=re.M)[:-1]
    assert len(sections) >= 5 and all("```python" in s for s in sections), "a documented module without an example"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for lang, body in code_blocks(text):
        if lang == "python":
            exec(compile(body, "docs/reference/api.md", "exec"), namespace)  # the page's own examples, run as written
    out = capsys.readouterr().out
    assert "1 big" in out and "big - small: +" in out and out.rstrip().endswith("1 180")


def test_the_readmes_config_plans_as_written(tmp_path, monkeypatch):
    """The README's own-models block is a whole run config: it plans with a prompts file beside it."""
    (body,) = [b for lang, b in code_blocks(README.read_text(encoding="utf-8")) if lang == "yaml"]
    data = yaml.safe_load(body)
    assert {"prompts", "models", "judge", "battles"} <= set(data)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "my-arena.yaml").write_text(body, encoding="utf-8")
    (tmp_path / data["prompts"]["path"]).write_text(
        '{"question_id": 1, "turns": ["Name a prime number."]}\n'
        '{"question_id": 2, "turns": ["Write a haiku about rain."]}\n', encoding="utf-8")
    res = runner.invoke(app, ["plan", "my-arena.yaml", "-w", str(tmp_path / "ws"), "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    judged = [ln for ln in plan["lines"] if ln.get("step") == "judge"]
    assert judged and plan["totals"]["calls"] > 0
    assert not (tmp_path / "ws").exists()


# ---- examples/README.md and the configs' names ---------------------------------------------------------------------


def test_the_examples_index_lists_every_config_once_as_a_template_or_an_experiment_record():
    index = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.-]+\.yaml)` \| ([^|]+) \|", index, re.M)
    listed = [name for name, _ in rows]
    assert sorted(listed) == sorted(e.name for e in EXAMPLES), "examples/README.md: one line for each config"
    assert {kind.strip() for _, kind in rows} <= {"template", "experiment record"}


def test_no_two_configs_share_a_workspace():
    """Each run or flywheel config has its own name:, so its own default workspace (workspaces/NAME)."""
    names: dict[str, str] = {}
    for example in EXAMPLES:
        data = yaml.safe_load(example.read_text(encoding="utf-8"))
        if "sources" in data or "input_set" in data:
            continue  # a test set or pool build: it writes into the workspace it names, beside the test set
        assert "name" in data, f"{example.name} has no name: (its workspace would be workspaces/arena)"
        assert data["name"] not in names, f"{example.name} and {names[data['name']]} share name: {data['name']}"
        names[data["name"]] = example.name


@pytest.mark.parametrize(("args", "missing", "origin"), [
    (["testset", "build", "examples/testset.yaml"], "arena-hard-v0.1/question.jsonl", "lmarena/arena-hard-auto"),
    (["pool", "build", "examples/pool.yaml"], "sharegpt_sample/dummy_conversation.json", "lm-sys/FastChat"),
    (["plan", "examples/open-prompts.yaml"], "vicuna_bench/question.jsonl", "lm-sys/FastChat"),
])
def test_a_config_whose_data_is_absent_says_which_file_and_where_to_get_it(args, missing, origin, tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ../shared/data beside it
    config = ROOT / args[-1]
    res = runner.invoke(app, [*args[:-1], str(config), "-w", str(tmp_path / "ws")])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert missing in text and origin in text and str(tmp_path) in text, text
    assert not (tmp_path / "ws").exists()  # stopped before it started
