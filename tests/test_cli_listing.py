"""`arena` and `arena --help` list the commands without importing them (``cli.listing``), exactly as the real app
would list them."""

from __future__ import annotations

import os
import subprocess
import sys

from arena_learning.cli.listing import COMMANDS, HELP, table_from_app

CODE_REAL = "import sys; from arena_learning.cli import app; sys.argv = ['arena', *sys.argv[1:]]; app()"
CODE_FAST = "from arena_learning.__main__ import main; import sys; sys.argv = ['arena', *sys.argv[1:]]; main()"
CODE_IMPORTS = ("import sys; from arena_learning.__main__ import main; sys.argv = ['arena', '--help']\n"
                "try:\n    main()\nfinally:\n    print(sorted(m for m in sys.modules if m.startswith('arena_learning.')"
                " and m.split('.')[1] not in ('cpu_isa', '__main__')), file=sys.stderr)")


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "TERM": "dumb"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def test_the_table_is_the_real_apps():
    from arena_learning.cli import app

    assert app.info.help == HELP
    assert list(COMMANDS) == table_from_app(), "the commands changed: run `python -m arena_learning.cli.listing`"


def test_the_listing_prints_what_the_real_app_prints_and_exits_as_it_does():
    for args in (["--help"], []):
        fast, real = _run(CODE_FAST, *args), _run(CODE_REAL, *args)
        assert (fast.returncode, fast.stdout, fast.stderr) == (real.returncode, real.stdout, real.stderr), args
        assert "flywheel" in fast.stdout + fast.stderr
    assert _run(CODE_FAST).returncode == 2  # `arena` alone: the listing, then exit 2, as Typer does


def test_listing_the_commands_imports_none_of_them():
    ran = _run(CODE_IMPORTS)
    assert ran.returncode == 0
    assert ran.stderr.strip().splitlines()[-1] == "['arena_learning.cli', 'arena_learning.cli.listing']"
