# Kotonia TUI. `make run` starts the app on the embedded default model; `make test` runs the suite.
SHELL := bash
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test lint bench install install-test clean

install:
	@scripts/install $(VENV)

install-test:
	@scripts/install $(VENV) test

run: install
	@$(VENV)/bin/kotonia

# One pytest-xdist worker per core (tests/settings.py `engine_threads` gives each worker's
# engines its share of the cores); worksteal chosen by measurement (docs/decisions.md D-23);
# the ten slowest tests are listed at the end (the issue-29 closing note reports them).
test: install-test lint
	@$(PY) -m pytest -q -ra -n auto --dist worksteal --durations=10

lint: install-test
	@$(VENV)/bin/ruff check kotonia_tui tests benchmarks scripts
	@$(VENV)/bin/ruff format --check kotonia_tui tests benchmarks scripts
	@$(VENV)/bin/lint-imports
	@$(VENV)/bin/mypy

bench: install-test
	@$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
