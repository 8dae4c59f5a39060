# Fleet: `make run` (set up and run everything with a demo fleet), `make test` (the whole suite).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.12 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
DEMO_GPUS ?= 2000
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/fleet
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

.PHONY: run test test-pg test-chaos test-chaos-repeat test-sqlite lint bench bench-inventory bench-telemetry bench-firmware bench-load bench-procurement bench-decommission bench-acceptance setup chromium

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 12), "Fleet needs Python 3.12 (pyenv reads .python-version)"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed
	$(PY) manage.py migrate --no-input
	$(PY) manage.py createcachetable
	$(PY) manage.py bootstrap --demo-gpus $(DEMO_GPUS)

run: setup
	PORT=$(PORT) $(VENV)/bin/honcho -f Procfile start

chromium:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

test: $(VENV)/.installed chromium test-pg test-sqlite

test-pg:
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest

# The rollout engine's chaos runs alone (real worker processes; about 6-7 minutes on 2 cores). `make test`
# (test-pg) runs them too: they are in the default selection.
test-chaos:
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest -m chaos -p no:cacheprovider

# Every chaos test, RUNS times in a row (fresh processes each run): the tally shows a test whose fault may not land.
RUNS ?= 10
test-chaos-repeat:
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) tests/repeat_chaos.py --runs $(RUNS)

test-sqlite:
	rm -f var/test-sqlite.sqlite3
	DATABASE_URL=sqlite:///$(CURDIR)/var/test-sqlite.sqlite3 $(PY) -m pytest -m sqlite -p no:cacheprovider

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

bench: bench-inventory bench-telemetry bench-firmware bench-procurement bench-decommission bench-acceptance bench-load

bench-inventory: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench $(PY) bench/inventory.py

bench-telemetry: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_tel $(PY) bench/telemetry.py

bench-firmware: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_fw $(PY) bench/firmware.py

bench-load: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_load $(PY) bench/load.py

bench-procurement: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_proc $(PY) bench/procurement.py

bench-decommission: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_decom $(PY) bench/decommission.py

bench-acceptance: $(VENV)/.installed
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/fleet_bench_acc $(PY) bench/acceptance.py
