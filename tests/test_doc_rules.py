"""The docs say what the product does, once: rules every page and example config is held to.

- The words of how the project was built (issue numbers, "the quiet machine", "today", a CPU model, an
  absolute path of one checkout) stay out of the README, the docs and the example configs' comments.
- A figure with a confidence interval (``+13.8 [+1, +31]``, ``1119..1183``) is written once, in the results
  log, and inserted by ``benchmarks/docs_tables.py``: outside a generated block, a page holding one fails.
- A page names only configs, commands, options, judge folders and pip extras that exist.
- The README's tables are what the generator writes from ``benchmarks/results.jsonl``; its config block plans;
  ``examples/README.md`` lists every config, and no two configs share a workspace name.

The results page (generated) and a page whose title says it is a record of experiments are out of the rules'
scope. Pages other helpers are rewriting are marked where they fail now (``KNOWN``), so the list of pages still
to fix is visible in every run (xfail, or xpass once fixed). Fast: no model runs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

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


def _check(rule: str, name: str) -> list[str]:
    text = _text(name)
    if rule == "banned-words":
        return banned_words(text)
    if rule == "ci-figures":  # a guide's example output (a ```text block) shows a command's shape, not a result
        return ci_figures(OUTPUT_BLOCK.sub("", text))
    path = ROOT / name
    return missing_names(text, [] if path.suffix == ".yaml" else page_commands(path))


RULES = ("banned-words", "ci-figures", "names")
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
