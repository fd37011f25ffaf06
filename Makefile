# The two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[examples]'
	touch $@

# The tests need Ray (tests/raycluster, --backend ray); `make run` does not.
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,ray]'
	touch $@ $(STAMP_RUN)

## run: install, start the server on its defaults, show example training jobs, keep serving
run: $(STAMP_RUN)
	@PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/demo.sh

## test: install the test needs (Ray included) and run the whole suite
test: $(STAMP_TEST)
	$(BIN)/python -m pytest

## check: lint and type-check src/
check: $(STAMP_TEST)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

## bench: the performance figures of docs/benchmarks.md
bench: $(STAMP_TEST)
	$(BIN)/python bench/submit.py --json
	$(BIN)/python bench/cli.py --json
	$(BIN)/python bench/schedule_pass.py --json
	$(BIN)/python bench/packing.py --json
	$(BIN)/python bench/estimates.py --json
	$(BIN)/python bench/telemetry.py --json
	$(BIN)/python bench/ddp_overhead.py --json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
