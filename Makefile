# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint lock browser bench bench-check clean llama docs

# constraints.txt: the exact versions the tests and the quickstarts run on (pyproject.toml declares ranges); every pip
# call of the set-up honours it (PIP_CONSTRAINT), the llama.cpp build's included. torch is its CPU build, which lies
# on disk here
$(STAMP): pyproject.toml constraints.txt Makefile src/arena_learning/engines/llama_build.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# llama.cpp built for any x86-64 CPU (AVX2), not -march=native: built once (5-7 min), kept in
	# ~/.cache/arena-learning/wheels, never taken from pip's cache (see engines/llama_build.py)
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(PY) src/arena_learning/engines/llama_build.py
	# every extra but vllm (a CUDA GPU's), the tests' and the docs' tools: the install page's table says which job
	# needs which extra
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(PY) -m pip install --quiet -e '.[all,dev,docs]'
	touch $(STAMP)

# constraints.txt again from the environment `make` built (after upgrading a package in .venv by hand, say)
lock: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable | LC_ALL=C sort -f; } > constraints.new
	mv constraints.new constraints.txt

demo: $(STAMP)
	$(VENV)/bin/arena run examples/quickstart.yaml
	@echo "Next, the flywheel (the 0-shot model trained on what two stronger models win, three rounds; how long here: arena plan examples/flywheel.yaml --flywheel --measure):"
	@echo "  $(VENV)/bin/arena flywheel examples/flywheel.yaml"

# the tests gate lint and types too (CI runs `make test`)
# two pytest workers (pytest-xdist): a third less time than one process on 2 cores; the results page's
# make_test.minutes has each measurement of the suite, with its date and commit
# --durations=10: every run names its ten slowest tests
# --dist loadgroup: the tests that share an expensive module or session fixture run on one worker, which builds it
# once (tests/conftest.py groups them)
test: lint browser
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=10

# the report's and the vote page's browser tests drive Debian's Chromium, headless: installed when absent (as root;
# otherwise the command to type is printed). ARENA_CHROMIUM names another Chromium
browser:
	@command -v chromium >/dev/null || [ -n "$$ARENA_CHROMIUM" ] || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
		else echo "the browser tests need Chromium: sudo apt-get install chromium (or set ARENA_CHROMIUM)"; exit 1; fi; }

test-fast: $(STAMP) browser
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

# ruff (rules and reasons in pyproject.toml) and mypy on src/ (the files of [tool.mypy])
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

# the docs site into site/, offline (no fonts or plugins fetched); the generated pages first, then the measured
# tables of the README and the docs inserted from benchmarks/results.jsonl
docs: $(STAMP)
	$(PY) -m arena_learning.config_reference
	$(PY) -m arena_learning.cli.commands_reference
	$(PY) benchmarks/results_page.py
	$(PY) benchmarks/docs_tables.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# the maintained benchmarks, each with its goal (exit 1 when one is missed, after all have run); how long it takes is
# the results page's make_bench.minutes (the llama.cpp engine runs its default batch, 8, against one at a time
# only: at five batch sizes that script alone takes about 12 minutes). By hand, not here: bench_draws.py and
# bench_recipes.py (several full flywheels), bench_plan_minutes.py (a config's real run), check_alpaca_eval_exact.py
# (needs alpaca_eval's own venv), gpu_check.py (a GPU machine), bench_aim.py (a flywheel's aimed and even arms, two
# full flywheels), bench_cost.py (arena plan's prices of a hosted run; the shared data), bench_prompt_board.py and
# bench_rip.py (a finished flywheel's
# workspace: `python benchmarks/bench_prompt_board.py WS`); bench_check.py is `make bench-check`, docs_tables.py
# is `make docs`
BENCH_SCRIPTS := \
	"benchmarks/bench_battle_stage.py --repeat 3" benchmarks/bench_batch.py benchmarks/bench_import_grades.py \
	benchmarks/bench_openai_engine.py benchmarks/bench_ratings.py benchmarks/bench_ray.py benchmarks/bench_schedule.py \
	benchmarks/bench_votes.py "benchmarks/bench_report.py --runs 3" benchmarks/reliability.py \
	"benchmarks/bench_judge_truth.py --quick" "benchmarks/bench_llamacpp_engine.py --batches 8,1" benchmarks/bench_curate.py \
	benchmarks/bench_gguf_export.py benchmarks/bench_install.py
# every script runs, whatever the one before it gave; the ones that missed their goal are named at the end (exit 1)
bench: $(STAMP)
	@missed=""; for script in $(BENCH_SCRIPTS); do \
		echo "== $(PY) $$script"; $(PY) $$script || missed="$$missed\n  $(PY) $$script"; \
	done; \
	if [ -n "$$missed" ]; then printf "goal missed or failed (rerun one by one):$$missed\n"; exit 1; fi; \
	echo "every benchmark met its goal"

# the README's headline figures, measured quick (about 2 min) and compared with their last record in
# benchmarks/results.jsonl: names each one more than 20% worse, with the command that reproduces it.
# A benchmark, not a test: it exits 0 whatever the figures. BENCH_CHECK=--record appends the new figures.
bench-check: $(STAMP)
	$(PY) benchmarks/bench_check.py $(BENCH_CHECK)

# rebuild the portable llama.cpp library (after `arena doctor` reports a crash, or a compiler change)
llama:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) src/arena_learning/engines/llama_build.py --rebuild

clean:
	rm -rf $(VENV) workspaces .pytest_cache site
