# Developer and CI entry points. Needs only python3 (3.11+) and make; `make test`
# builds .venv on first use and reinstalls whenever pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   ?= examples/restart_recovery.py
DEMO_DB ?= demo.db
# Leaves a payment waiting for review in $(DEMO_DB), and prints how to open the inbox.
DEMO_REVIEW ?= examples/pending_review.py

# Test-only JavaScript (axe-core, which the inbox's browser tests run in each page),
# pinned by package-lock.json and installed from the npm registry by `npm ci`.
NODE_TOOLS := node_modules/.package-lock.json

# Only the source folders that exist (examples/ may not yet); docs/_ext holds the site's
# griffe extension.
LINT_PATHS := $(wildcard src tests examples benchmarks scripts docs/_ext)

.PHONY: venv node-tools lint typecheck docs-build docs test demo bench bench-scale clean

venv: $(STAMP)

node-tools: $(NODE_TOOLS)

$(NODE_TOOLS): package.json package-lock.json
	npm ci --no-audit --no-fund

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/): --strict turns every warning, a broken
# link or an API reference that does not resolve, into a failure. NO_MKDOCS_2_WARNING
# silences the theme's banner about MkDocs 2.
docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# Serves the site at http://127.0.0.1:8000 and rebuilds it on every change.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The suite runs in TEST_WORKERS processes (pytest-xdist), each taking whole test modules
# (--dist loadfile) in the order collected (--no-loadscope-reorder: the long benchmark
# smoke module starts early, not last): a module's fixtures are made once and its tests
# never race each other; each process starts its own PostgreSQL server (ADR 0051). Four
# on two cores: the tests wait on syncs, child processes, servers and deadlines, and two
# workers left the cores idle for a third of the run (ADR 0051, amended).
TEST_WORKERS ?= 4

# The checks before the suite run side by side, each one's output printed whole. The
# suite writes bytecode even where the environment asks Python not to
# (PYTHONDONTWRITEBYTECODE): it starts the command line about a thousand times, and
# each start compiled the whole library again (ADR 0051, amended).
test: $(STAMP) $(NODE_TOOLS)
	$(MAKE) --no-print-directory --jobs=3 --output-sync=target lint typecheck docs-build
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The demo's store is kept in $(DEMO_DB), for the command line and the inbox to look at
# afterwards: a review waits in it.
demo: $(STAMP)
	rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
	$(BIN)/python $(DEMO) $(DEMO_DB)
	@echo "The demo's store is $(DEMO_DB): $(BIN)/covonaut-es threads --store sqlite:///$(DEMO_DB)"
	@echo
	$(BIN)/python $(DEMO_REVIEW) $(DEMO_DB)

# Installs the pinned peers (LangGraph) and writes BENCHMARKS.md; takes several minutes.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run.py

# Many threads (benchmarks/SCALE.md, which BENCHMARKS.md includes): every figure at
# SCALE and ten times SCALE threads, on SQLite and on PostgreSQL with fsync on. Run
# apart from `make bench`; SCALE=100 (100 and 1,000 threads) takes about a quarter of an hour.
SCALE ?= 100
bench-scale: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/scale.py --scale $(SCALE)

clean:
	rm -rf $(VENV) node_modules build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -type d -prune -exec rm -rf {} +
