"""User mistakes get a clear message and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess

import pytest
from typer.testing import CliRunner

from arena_learning.cli import app
from arena_learning.config import RunConfig, load_config_file
from arena_learning.errors import ConfigError

from .conftest import ARENA, write_config

runner = CliRunner()

GOOD = """
name: t
tasks: {n: 9}
models:
  - {name: a, engine: llamacpp, model: bundled, mode: completion}
  - {name: b, engine: llamacpp, model: bundled, mode: completion}
"""


def run_cli(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def test_unknown_key_names_the_key_and_the_file(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD + "judge: {kind: verifier, tie_treshold: 1}\n")
    code, out = run_cli("run", cfg, "-w", tmp_path / "ws")
    assert code == 2
    assert "judge.tie_treshold" in out and "unknown key" in out and str(cfg) in out
    assert "Traceback" not in out


def test_wrong_type_names_the_key(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD.replace("n: 9", "n: many"))
    with pytest.raises(ConfigError, match=r"tasks\.n: .*got 'many'"):
        load_config_file(cfg, RunConfig)


def test_unknown_engine_is_an_error_with_exit_code_2(tmp_path):
    cfg = write_config(tmp_path / "run.yaml",
                       GOOD.replace("engine: llamacpp, model: bundled, mode: completion}\n  - {name: b",
                                    "engine: tgi-magic}\n  - {name: b", 1))
    code, out = run_cli("answer", cfg, "-w", tmp_path / "ws")
    assert code == 2
    assert "models.0.engine" in out and "llamacpp" in out and "openai" in out


def test_missing_model_file_is_an_error_with_exit_code_2(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD.replace("model: bundled", f"model: {tmp_path}/nope.gguf", 1))
    code, out = run_cli("answer", cfg, "-w", tmp_path / "ws")
    assert code == 2
    assert "model file not found" in out and "nope.gguf" in out


def test_missing_config_file_and_bad_yaml(tmp_path):
    code, out = run_cli("run", tmp_path / "absent.yaml")
    assert code == 2 and "config file not found" in out
    bad = write_config(tmp_path / "bad.yaml", "models: [\n  - {name: a\n")
    code, out = run_cli("run", bad)
    assert code == 2 and "not valid YAML" in out and "bad.yaml:" in out


def test_duplicate_names_and_unknown_anchor(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD.replace("name: b", "name: a"))
    code, out = run_cli("run", cfg)
    assert code == 2 and "repeated: a" in out
    cfg = write_config(tmp_path / "run2.yaml", GOOD + "ratings: {anchor: zed}\n")
    code, out = run_cli("run", cfg)
    assert code == 2 and "'zed' is not one of the models" in out


def test_openai_model_without_its_api_key_env_is_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("ARENA_TEST_NO_SUCH_KEY", raising=False)
    cfg = write_config(
        tmp_path / "run.yaml",
        GOOD.replace("engine: llamacpp, model: bundled, mode: completion}",
                     "engine: openai, model: x, base_url: 'http://127.0.0.1:9/v1', "
                     "api_key_env: ARENA_TEST_NO_SUCH_KEY}", 1),
    )
    code, out = run_cli("answer", cfg, "-w", tmp_path / "ws")
    assert code == 2 and "ARENA_TEST_NO_SUCH_KEY" in out


def test_overrides_change_fields_and_are_validated(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD)
    got = load_config_file(cfg, RunConfig, ["tasks.n=27", "models.b.params.max_tokens=5"])
    assert got.tasks.n == 27 and got.model("b").params.max_tokens == 5
    with pytest.raises(ConfigError, match="no list item 'zz'"):
        load_config_file(cfg, RunConfig, ["models.zz.params.max_tokens=5"])


def test_leaderboard_of_a_directory_that_is_not_a_workspace(tmp_path):
    code, out = run_cli("leaderboard", tmp_path)
    assert code == 2 and "not a workspace" in out


def test_every_command_has_help():
    code, out = run_cli("--help")
    assert code == 0
    commands = [c for c in ("run", "answer", "battle", "leaderboard", "serve") if c in out]
    assert len(commands) == 5
    for c in commands:
        code, out = run_cli(c, "--help")
        assert code == 0 and "Usage" in out


def test_console_script_exits_2_on_a_config_error(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", "models: 3\n")
    proc = subprocess.run([*ARENA, "run", str(cfg)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "models" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_overrides_are_config_errors(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD)
    with pytest.raises(ConfigError, match="'name' is a value, not a section"):
        load_config_file(cfg, RunConfig, ["name.x=1"])
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_file(cfg, RunConfig, ["tasks.n=[1"])
    got = load_config_file(write_config(tmp_path / "r2.yaml", GOOD + "ratings:\n"), RunConfig, ["ratings.bootstrap=7"])
    assert got.ratings.bootstrap == 7


def test_base_url_needs_a_scheme_and_two_servers_cannot_share_a_model_id(tmp_path):
    two = GOOD.replace("{name: a, engine: llamacpp, model: bundled, mode: completion}",
                       "{name: a, engine: openai, model: local, base_url: 'http://127.0.0.1:1/v1'}").replace(
                       "{name: b, engine: llamacpp, model: bundled, mode: completion}",
                       "{name: b, engine: openai, model: local, base_url: 'http://127.0.0.1:2/v1'}")
    code, out = run_cli("run", write_config(tmp_path / "r.yaml", two))
    assert code == 2 and "the ledger would mix their answers" in out
    code, out = run_cli("run", write_config(tmp_path / "s.yaml", two.replace("'http://127.0.0.1:1/v1'", "localhost:1")))
    assert code == 2 and "must start with http:// or https://" in out


def test_a_workspace_path_that_is_a_file_is_an_error(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", GOOD)
    (tmp_path / "afile").write_text("x")
    code, out = run_cli("answer", cfg, "-w", tmp_path / "afile")
    assert code == 2 and "cannot use" in out and "as a workspace" in out


def test_a_report_that_fails_is_a_warning_with_the_command_to_retry(tmp_path):
    # `arena run` and `arena flywheel` both end with this: the results stay, the command succeeds
    import io

    from rich.console import Console

    from arena_learning.cli.errors import write_report_or_warn

    ws = tmp_path / "ws [1]"  # brackets stay text, never markup
    (ws / "report.html").mkdir(parents=True)  # the report cannot be written there
    out = io.StringIO()
    write_report_or_warn(ws, Console(file=out, width=400))
    text = out.getvalue()
    assert text.startswith("warning: the HTML report failed (")
    assert f"the results are kept in {ws}; retry with `arena report {ws}`" in text
