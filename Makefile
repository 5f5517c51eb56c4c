# Two commands for a new user: `make demo` and `make test`. Each bootstraps .venv from the lock file.
SHELL := /bin/bash
PYTHON ?= python3
# The oldest Python the lock's pins support (numpy/pandas/scipy/scikit-learn releases need 3.11+).
PYTHON_FLOOR := 3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export RAY_USAGE_STATS_ENABLED := 0
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__DAGS_FOLDER ?= $(CURDIR)/dags
export AIRFLOW__CORE__UNIT_TEST_MODE := False

.PHONY: venv demo test test-durations test-unit compose-env compose-test lint format bench clean lock

venv: $(STAMP)

# Rebuild when the lock file or the package metadata changes (a stale venv is reinstalled).
$(STAMP): requirements.lock setup.cfg pyproject.toml
	@test -x $(BIN)/python || { v=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	  printf '%s\n%s\n' $(PYTHON_FLOOR) $$v | sort -V -C || { echo "Python $(PYTHON_FLOOR)+ is needed, $(PYTHON) is $$v: run 'make PYTHON=python$(PYTHON_FLOOR) ...'" >&2; exit 1; }; \
	  $(PYTHON) -m venv $(VENV); }
	@test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	$(BIN)/uv pip sync --quiet --compile-bytecode --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@touch $(STAMP)

lock:
	$(BIN)/uv pip compile setup.cfg --extra kubernetes --extra workloads --extra dev \
		--python-version $(PYTHON_FLOOR) -o requirements.lock

demo: $(STAMP)
	$(BIN)/python -m tools.demo

# The full suite on TEST_WORKERS pytest-xdist workers (each with its own Ray head, Airflow home and
# emulator; an idle worker takes queued tests from the busy one). It ends with the 20 slowest tests and
# the number of Ray heads the session started. pytest exits 5 when it collected nothing: that is a failure, not a pass.
# The workers run the longest modules first (tests/fixtures/test_order.py, by tests/module_seconds.json);
# `make test-durations` runs the suite and rewrites that file.
TEST_WORKERS ?= 2
TEST_ARGS ?=
test: $(STAMP)
	@$(BIN)/python -m pytest tests -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal --durations=20 $(TEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests were collected: failing" >&2; exit 1; fi; exit $$rc

test-durations:
	$(MAKE) test TEST_ARGS="--store-module-seconds tests/module_seconds.json"

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests -q -m unit -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal

# A .env beside docker-compose.yaml with generated secrets (RAY_AUTH_TOKEN, AIRFLOW_JWT_SECRET,
# AIRFLOW_FERNET_KEY), which the compose file requires; an existing .env is left as it is.
compose-env:
	@test -e .env && echo ".env exists: left as it is" || { umask 077 && $(PYTHON) -c 'import base64, os, secrets; \
	  print(f"RAY_AUTH_TOKEN={secrets.token_hex(32)}\nAIRFLOW_JWT_SECRET={secrets.token_hex(32)}\n" \
	  f"AIRFLOW_FERNET_KEY={base64.urlsafe_b64encode(os.urandom(32)).decode()}")' > .env && echo ".env written"; }

# docker-compose.yaml end to end (docs/compose.md): builds the images (stand-in bases, no registry
# needed), starts the whole stack, runs the shipped DAGs through the REST API, checks and removes it.
# Needs a running Docker daemon, docker-compose and debootstrap. COMPOSE_TEST_ARGS=--base official
# builds on the official images instead; --keep leaves the stack up.
compose-test: $(STAMP)
	$(BIN)/python -m tests.compose.run $(COMPOSE_TEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy airflow_ray_provider dags tools

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) .airflow demo_output benchmarks/out
