# The two commands: `make run` starts the machine on its embedded defaults, `make test` checks it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast schema lint typecheck pytest bench clean

# The install's own output goes to a log (the console stays short); its tail is shown if it fails.
$(STAMP): pyproject.toml
	@echo "installing into $(VENV) (about a minute the first time; log: $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip && $(BIN)/python -m pip install -e '.[dev]'; } \
		> $(VENV)/install.log 2>&1 || { tail -n 30 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/followup dev

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

# The same checks without the tests marked slow (those that start Dagster or other processes).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -m "not slow"

# Regenerate followup_pipeline/store/schema.sql after adding a migration; review the diff.
schema: $(STAMP)
	$(BIN)/python -m followup_pipeline_tests.store.dump_schema

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .followup .mypy_cache .pytest_cache .ruff_cache
