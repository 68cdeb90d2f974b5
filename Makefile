# Every target bootstraps .venv itself on a fresh machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export XLA_PYTHON_CLIENT_PREALLOCATE := false

.PHONY: venv test test-all lint quickstart bench clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml scripts/find_python.sh scripts/setup.sh
	bash scripts/setup.sh $(VENV)
	@touch $(STAMP)

test: venv
	bash scripts/run_tests.sh $(PY) -m "not slow and not gpu"

test-all: venv
	bash scripts/run_tests.sh $(PY) -m "not gpu"

lint: venv
	$(PY) -m ruff check vlajax tests experiments scripts

quickstart: venv
	$(PY) -m vlajax.quickstart

clean-venv:
	rm -rf $(VENV)
