# The two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test check bench clean postgres cc chromium slurm bytecode

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# `examples` takes any torch from 2.1 on (a user's venv keeps its own); this venv, which has
# none yet, gets the release the tests pin (the `test` extra's), not whatever is newest.
$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[examples]' "$$($(BIN)/python -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"] if d.startswith("torch")))')"
	touch $@

# The tests need Ray (tests/raycluster, --backend ray); `make run` does not.
# The `amd` extra's amdsmi goes in a folder of its own, off the venv's path: the tests put it on
# PYTHONPATH only for the processes that load the fake libamd_smi.so (tests/fakeamdsmi), since
# its import fails without the library, and Ray's import with it.
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,ray]'
	$(BIN)/pip install -q --upgrade --no-deps --target $(VENV)/amdsmi \
	  "$$($(BIN)/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["amd"][0])')"
	touch $@ $(STAMP_RUN)

# gpuyard's own modules compiled once (an editable install leaves them as source): where
# PYTHONDONTWRITEBYTECODE is set, every server, CLI call and test process would otherwise compile
# each module it imports, every time (a server's imports: 1.8 s against 1.25 s compiled, loaded).
# Python still reads a .pyc with the variable set; a file edited since is compiled in memory.
bytecode:
	@$(BIN)/python -m compileall -q -j0 src tests bench >/dev/null

## run: install, start the server on its defaults, show example training jobs, keep serving
run: $(STAMP_RUN) bytecode
	@PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/demo.sh

## test: install the test needs (Ray, PostgreSQL's server included) and run the whole suite
# TEST_WORKERS=2: two pytest-xdist workers, the Ray and Slurm tests one at a time on one
# (tests/conftest.py): ~16 min instead of ~45. Not the default yet: three of four parallel runs
# had one srun/pty test that never saw its step end (docs/benchmarks.md); 0: one process.
TEST_WORKERS ?= 0
test: $(STAMP_TEST) postgres cc chromium slurm bytecode
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

# The store contract suite runs over PostgreSQL too, on a throw-away server the tests start
# themselves (tests/postgres_server.py): Debian's server binaries, installed here when missing
# (as root, as CI is). The package's own cluster service is kept from starting (policy-rc.d):
# the tests start their own. Without root, the PostgreSQL tests skip (and fail under CI=1).
PG_INITDB := $(wildcard /usr/lib/postgresql/*/bin/initdb)

postgres:
ifeq ($(PG_INITDB),)
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "PostgreSQL's server is not installed: apt-get install postgresql, as root"; exit 0; \
	fi; \
	set -e; made=; \
	if [ ! -e /usr/sbin/policy-rc.d ]; then \
	  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made=1; \
	fi; \
	trap '[ -z "$$made" ] || rm -f /usr/sbin/policy-rc.d' EXIT; \
	echo "installing PostgreSQL's server (Debian's postgresql) for the tests"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq; \
	apt-get install -y -qq --no-install-recommends postgresql >/dev/null
endif

# tests/e2e/test_clock_jump.py builds a small preload library (a wall-clock step) with the C
# compiler: installed here when missing (as root, as CI is; without root the test skips).
cc:
	@if ! command -v cc >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "no C compiler: apt-get install gcc, as root"; exit 0; fi; \
	  echo "installing a C compiler (Debian's gcc) for the tests"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; \
	fi

# tests/web drive the dashboard in a real headless browser: Debian's chromium (playwright's own
# browser download cannot work offline), installed here when missing (as root, as CI is;
# without root the browser tests skip, and fail under CI=1).
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "no chromium: apt-get install chromium, as root"; exit 0; fi; \
	  echo "installing Debian's chromium for the dashboard's browser tests"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi

# tests/slurm_side run the same scripts on a throw-away Slurm (bench/slurm/setup.sh starts it
# on its own ports and folder) and on gpuyard: Debian's slurm-wlm, installed here when missing
# (as root, as CI is; without root those tests skip, and fail under CI=1). Its own services
# only start with an /etc/slurm/slurm.conf, which it does not get.
slurm:
	@if ! PATH="$$PATH:/usr/sbin:/sbin" command -v slurmctld >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "no Slurm: apt-get install slurm-wlm, as root"; exit 0; fi; \
	  echo "installing Debian's slurm-wlm for the side-by-side tests against Slurm"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm >/dev/null; \
	fi

## check: lint and type-check src/
check: $(STAMP_TEST)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

## bench: the performance figures of docs/benchmarks.md
bench: $(STAMP_TEST) bytecode
	$(BIN)/python bench/submit.py --json
	$(BIN)/python bench/cli.py --json
	$(BIN)/python bench/schedule_pass.py --json
	$(BIN)/python bench/packing.py --json
	$(BIN)/python bench/estimates.py --json
	$(BIN)/python bench/telemetry.py --json
	$(BIN)/python bench/ddp_overhead.py --json
	$(BIN)/python bench/dashboard.py --json
	$(BIN)/python bench/mixed_load.py --json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
