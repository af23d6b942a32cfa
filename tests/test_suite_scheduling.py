"""The suite's own scheduling: `make test` runs `pytest -n 2 --dist loadgroup`, which sends the tests that share
an expensive fixture (a trained flywheel, a served model, a Ray instance) to one worker, so that it is built once."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("loadgroup-check")
def test_a_grouped_test_carries_its_group_in_its_id(request):
    """pytest-xdist groups tests by a suffix it adds to their ids. pytest 9.2 derives ids from another field, so
    with pytest-xdist 3.8 the suffix is lost and `--dist loadgroup` silently schedules like `--dist load`: every
    module fixture was built on both workers (minutes of `make test`). pyproject.toml pins a pair that works."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run with pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith("@loadgroup-check"), (
        f"--dist loadgroup did not tag {request.node.nodeid!r} with its group: shared fixtures are built on every "
        "worker; install the pytest and pytest-xdist that pyproject.toml pins (pip install -e '.[dev]')")
