# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: setup browser docs-assets test test-fast test-portable demo data lint format bench clean docs screenshots

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch==2.13.0 first: a bare `torch` requirement would pull a multi-GB CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[dev]'
	# laplace-torch for the Laplace cross-checks, without its torchvision requirement (PyPI's
	# torchvision does not import beside this torch, and its presence breaks torchmetrics' import)
	$(PIP) install --quiet --no-deps laplace-torch==0.3 asdfghjkl==0.1a4 backpack-for-pytorch==1.7.1 \
		curvlinops-for-pytorch==3.0.1 einops unfoldNd einconv linear_operator opt-einsum
	touch $(STAMP)

setup: $(STAMP)

# Debian's chromium for the browser test of report.html (tests/app/test_report_browser.py):
# installed quietly when missing and the user is root; otherwise nothing (that test is skipped).
CHROMIUM_APT := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	chromium fonts-liberation >/dev/null 2>&1
browser:
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null 2>&1; then \
		echo "make: installing chromium (apt-get) for the browser test of report.html"; \
		$(CHROMIUM_APT) || { apt-get update -qq >/dev/null 2>&1 && $(CHROMIUM_APT); } \
		|| echo "make: could not install chromium; the browser test will be skipped"; \
	fi

test: $(STAMP) browser docs-assets
	BENSEMBLE_HYPOTHESIS_PROFILE=$${BENSEMBLE_HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -q -n 2 --dist loadfile

# the numerics folders on torch's portable kernels (no AVX) with one OpenMP thread: a tolerance that
# only holds on this CPU's vector width or thread count fails here (issue 19); .ci/run runs it too
NUMERIC_TESTS = tests/metrics tests/calibration tests/uncertainty tests/regression tests/conformal \
	tests/search tests/core tests/layers
test-portable: $(STAMP)
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 BENSEMBLE_HYPOTHESIS_PROFILE=ci \
		$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow" -p no:cacheprovider $(NUMERIC_TESTS)

test-fast: $(STAMP) browser
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

# The documentation site (mkdocs-material + mkdocstrings), built offline into site/: open
# site/index.html from disk; docs-assets fetches the search shim (npm registry, pinned).
docs-assets:
	@bash scripts/docs_assets.sh

docs: $(STAMP) docs-assets
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# docs/figures/report_1280.png and report_390.png: the HTML report of `bensemble evaluate`;
# docs/figures/epistemic_reliability_k{2,10,100}.png: the default epistemic diagram at any K.
screenshots: $(STAMP) browser
	$(PY) scripts/report_screenshots.py
	$(PY) scripts/epistemic_k_figures.py

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) bensemble-report .pytest_cache .hypothesis
