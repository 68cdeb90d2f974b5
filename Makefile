# Every target bootstraps .venv itself on a fresh machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LIBERO_VENV := .venv-libero
LIBERO_STAMP := $(LIBERO_VENV)/.installed
export XLA_PYTHON_CLIENT_PREALLOCATE := false

.PHONY: venv libero test test-all lint quickstart quickstart-libero bench clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml scripts/find_python.sh scripts/setup.sh
	bash scripts/setup.sh $(VENV)
	@touch $(STAMP)

# LIBERO / LIBERO-PRO simulator workers: their own Python 3.11 venv (robosuite 1.4, mujoco<4; docs/libero.md)
libero: $(LIBERO_STAMP)

$(LIBERO_STAMP): scripts/setup_libero.sh
	rm -f $(LIBERO_STAMP)
	bash scripts/setup_libero.sh $(LIBERO_VENV)

# the tests start with the linter (seconds): an error it finds fails `make test` and so CI
test: venv libero
	$(PY) -m ruff check vlajax tests experiments scripts research
	VLAJAX_LIBERO_REQUIRED=1 bash scripts/run_tests.sh $(PY) -m "not slow and not gpu"

test-all: venv libero
	VLAJAX_LIBERO_REQUIRED=1 bash scripts/run_tests.sh $(PY) -m "not gpu"

lint: venv
	$(PY) -m ruff check vlajax tests experiments scripts research

quickstart: venv
	$(PY) -m vlajax.quickstart

# LIBERO demos -> SFT -> async RL -> evaluation before / during / after (vlajax/quickstart/libero.py)
quickstart-libero: venv libero
	$(PY) -m vlajax.quickstart.libero

clean-venv:
	rm -rf $(VENV)
