# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean llama docs

$(STAMP): pyproject.toml Makefile src/arena_learning/engines/llama_build.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# llama.cpp built for any x86-64 CPU (AVX2), not -march=native: built once (5-7 min), kept in
	# ~/.cache/arena-learning/wheels, never taken from pip's cache (see engines/llama_build.py)
	$(PY) src/arena_learning/engines/llama_build.py
	# torch is pinned to the CPU build that lies on disk (see pyproject.toml)
	# Ray (the `ray` extra) too: its backend's tests run a real local Ray instance; MkDocs (the `docs` extra):
	# the tests build the docs site
	$(PY) -m pip install --quiet -e '.[dev,ray,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/arena run examples/quickstart.yaml
	@echo "Next, the flywheel (the 0-shot model trained on its lost battles: an initial SFT round and four flywheel rounds, about 16-17 min on 2 cores):"
	@echo "  $(VENV)/bin/arena flywheel examples/flywheel.yaml"

# the tests gate lint and types too (CI runs `make test`)
test: lint
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# ruff (rules and reasons in pyproject.toml) and mypy on src/ (the files of [tool.mypy])
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

# the docs site into site/, offline (no fonts or plugins fetched); the generated pages first
docs: $(STAMP)
	$(PY) -m arena_learning.config_reference
	$(PY) benchmarks/results_page.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# rebuild the portable llama.cpp library (after `arena doctor` reports a crash, or a compiler change)
llama:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) src/arena_learning/engines/llama_build.py --rebuild

clean:
	rm -rf $(VENV) workspaces .pytest_cache site
