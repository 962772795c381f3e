# Two entry points for a fresh machine with Python 3.11: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CONSTRAINTS := requirements/constraints.txt
PORT ?= 8000

.PHONY: run test lint install install-dev install-train demo clean-data llm lock harnesses

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -qq --upgrade pip

$(VENV)/.installed: $(PY) pyproject.toml $(CONSTRAINTS)
	$(PIP) install -qq -c $(CONSTRAINTS) -e .
	touch $@

# torch first, alone: on the reference machines a local CPU wheel satisfies it, and asking
# for it together with the rest could pull a CUDA build instead.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -qq -c $(CONSTRAINTS) torch==2.13.0
	$(PIP) install -qq -c $(CONSTRAINTS) -e '.[dev,train,dense]'
	touch $@

# What SFT and RL jobs import (PyTorch, transformers, peft, TRL): `make run` leaves them out,
# so that the workbench starts without a gigabyte of wheels; the launch forms say so.
$(VENV)/.installed-train: $(VENV)/.installed
	$(PIP) install -qq -c $(CONSTRAINTS) torch==2.13.0
	$(PIP) install -qq -c $(CONSTRAINTS) -e '.[train]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev
install-train: $(VENV)/.installed-train

demo: install
	@echo "Migrating the database..."
	@$(PY) manage.py migrate --no-input -v0
	@$(PY) manage.py setup_demo

run: demo
	PORT=$(PORT) exec scripts/dev-server

# Tests get their own data directory (SQLite test file, broker folders, indexes), so a
# `make run` in the same checkout never picks up a test's tasks.
# The agent-CLI recording tests need the CLIs wherever node is installed.
# pytest-xdist runs the suite in one process per core (PYTEST_WORKERS=1 for one process);
# each gets its own test database, data folder and Redis broker database (config/env.py).
# One compute thread per process (OMP_NUM_THREADS=1, for PyTorch's trainers and encoders
# that the tests and their workers start): with a process per core, each library's own
# pool of a thread per core would oversubscribe the cores and spin.
# The 30 slowest tests are listed at the end: where the next minutes of CI would come from.
PYTEST_WORKERS ?= auto
test: install-dev $(if $(shell command -v npm),harnesses)
	HARNESS_DATA_DIR="$${HARNESS_DATA_DIR:-$$(mktemp -d)}" OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} \
		$(VENV)/bin/pytest \
		--numprocesses=$(PYTEST_WORKERS) --dist=loadgroup --durations=30 $(PYTEST_ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports
	$(PY) manage.py makemigrations --check --dry-run

clean-data:
	rm -rf var

# A real vLLM (CPU build) serving SmolLM2-135M-Instruct on 127.0.0.1:8011, in .llm/.
llm:
	scripts/llm/setup.sh
	scripts/llm/serve.sh

# The four coding-agent CLIs Polar trained (Claude Code, Codex, Qwen Code, Pi), pinned in
# harnesses/package-lock.json and installed into harnesses/node_modules, never globally.
# trajectories/agent_clis.py runs them headless against the recording proxy.
HARNESS_STAMP := harnesses/node_modules/.installed
$(HARNESS_STAMP): harnesses/package.json harnesses/package-lock.json
	# `npm install` with the lock, not `npm ci`: npm 11's ci refuses this lock over optional
	# platform packages (qwen-code's clipboard builds) that the lock rightly leaves out.
	cd harnesses && npm install --no-save --no-audit --no-fund --loglevel=error
	# qwen-code 0.24.4 ships its ripgrep without the execute bit (EACCES, then a slower grep).
	chmod +x harnesses/node_modules/@qwen-code/qwen-code/vendor/ripgrep/*/rg
	touch $@

harnesses: $(HARNESS_STAMP)

# Refresh the locks after changing dependencies: constraints.txt pins everything the dev
# venv has (dev and train extras included); base.txt pins what the runtime alone needs.
lock: install-dev
	$(PIP) freeze --exclude-editable | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/' > $(CONSTRAINTS)
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -qq -c $(CONSTRAINTS) .
	.venv-lock/bin/pip freeze | grep -v '^harness-workbench' > requirements/base.txt
	rm -rf .venv-lock
