# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup test test-fast demo data lint format bench clean docs

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch==2.13.0 first: a bare `torch` requirement would pull a multi-GB CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	BENSEMBLE_HYPOTHESIS_PROFILE=$${BENSEMBLE_HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -q -n 2 --dist loadfile

test-fast: $(STAMP)
	BENSEMBLE_HYPOTHESIS_PROFILE=$${BENSEMBLE_HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

demo: $(STAMP)
	$(VENV)/bin/bensemble demo --overwrite

# Fashion-MNIST IDX files for `bensemble reproduce fashion` (Debian/Ubuntu, as root).
data:
	apt-get install -y dataset-fashion-mnist

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The documentation site (mkdocs-material + mkdocstrings), built offline into site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) bensemble-report .pytest_cache .hypothesis
