# The two commands: `make run` starts the machine on its embedded defaults, `make test` checks it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The tests in two processes, each test file in one of them (its module-wide machines kept
# whole): most of the suite's time is spent waiting on daemons, sensors and timers, not on the CPU.
PARALLEL ?= -n 2 --dist loadfile

.PHONY: run test test-fast browser schema lint typecheck pytest bench proof scale-proof clean

# The install's own output goes to a log (the console stays short); its tail is shown if it fails.
$(STAMP): pyproject.toml
	@echo "installing into $(VENV) (about a minute the first time; log: $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@{ $(BIN)/python -m pip install --upgrade pip && $(BIN)/python -m pip install -e '.[dev]'; } \
		> $(VENV)/install.log 2>&1 || { tail -n 30 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/followup dev

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest $(PARALLEL)

# The same checks without the tests marked slow (those that start Dagster or other processes).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest $(PARALLEL) -m "not slow"

# The browser test drives Debian's Chromium (Playwright downloads none): installed with apt when
# missing and this runs as root; otherwise the test is skipped and says so. Never fails the build.
browser: $(STAMP)
	@command -v chromium > /dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null 2>&1; then \
			echo "installing Debian's chromium for the browser test (log: $(VENV)/browser.log)"; \
			export DEBIAN_FRONTEND=noninteractive; apt="apt-get -y -q -o DPkg::Lock::Timeout=60"; \
			{ $$apt install chromium || { $$apt update && $$apt install chromium; }; } \
				> $(VENV)/browser.log 2>&1 || echo "make browser: chromium could not be installed; see $(VENV)/browser.log"; \
		else \
			echo "make browser: no chromium, and no apt as root to install it: the browser test is skipped"; \
		fi; }

# Regenerate followup_pipeline/store/schema.sql after adding a migration; review the diff.
schema: $(STAMP)
	$(BIN)/python -m followup_pipeline_tests.store.dump_schema

# The load figures need wrk (Debian's package): installed with apt when missing, as root.
bench: $(STAMP)
	@command -v wrk > /dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null 2>&1 \
		&& DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=60 install wrk \
		> $(VENV)/bench.log 2>&1; } || echo "make bench: no wrk; the load figures are skipped"
	$(BIN)/python -m benchmarks

# The proof: the whole machine over 60 simulated business days, 300 deals, under chaos (faults
# at every vendor, runs killed for real, a Postgres crash); exits non-zero when an invariant
# fails. 42.5 minutes for seed 1 from a fresh clone (docs/reliability.md). `make proof SEED=2`: another world.
SEED ?= 1
proof: $(STAMP)
	$(BIN)/followup simulate --days 60 --deals 300 --chaos --seed $(SEED)

# The production shape scaled out on this machine (docs/scale.md): hosts made of network
# namespaces, nginx at the edge (Debian's package, installed here when missing), two ingress
# replicas, the Dagster roles apart, a load of signed webhooks with an ingress replica and the
# code server killed. Needs root; it fails, never skips, without it. About 7 minutes.
scale-proof: $(STAMP)
	@[ "$$(id -u)" = 0 ] || { echo "make scale-proof needs root (network namespaces, nginx)"; exit 2; }
	@command -v nginx > /dev/null 2>&1 || { echo "installing Debian's nginx (log: $(VENV)/nginx.log)"; \
		export DEBIAN_FRONTEND=noninteractive; apt="apt-get -y -q -o DPkg::Lock::Timeout=60"; \
		{ $$apt install nginx || { $$apt update && $$apt install nginx; }; } \
		> $(VENV)/nginx.log 2>&1 || { tail -n 20 $(VENV)/nginx.log; exit 1; }; \
		if command -v systemctl > /dev/null 2>&1; then systemctl disable --now nginx > /dev/null 2>&1 || true; fi; }
	$(BIN)/python -m scaleproof

clean:
	rm -rf $(VENV) .followup .mypy_cache .pytest_cache .ruff_cache
