# Set-up is part of every target: the first run creates .venv and installs everything (torch==2.13.0 first:
# it is the CPU wheel on local disk, any other request pulls a multi-GB CUDA build); later runs only
# refresh our editable install when setup files change. An editable install does not ship the start-up
# hook (a wheel does), so it is copied into site-packages here.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEPS := $(VENV)/.deps-installed
INSTALLED := $(VENV)/.pyserini-ext-installed
PYTEST := $(BIN)/python -m pytest
export PYSERINI_EXT_DATA ?= $(HOME)/.cache/pyserini_ext/datasets

.PHONY: setup demo prebuilt test test-slow lint bench models report clean

setup: $(INSTALLED)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(DEPS): setup.cfg | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q setuptools wheel
	$(BIN)/pip install -q ".[test,plot]"
	touch $@

$(INSTALLED): $(DEPS) setup.cfg setup.py pyserini_ext.pth
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	cp pyserini_ext.pth "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
	touch $@

demo: $(INSTALLED)
	scripts/seed_datasets.sh
	$(BIN)/python -m pyserini_ext.demo

# Builds the catalogue's indexes from the shipped models into dist/prebuilt and rewrites
# resources/prebuilt_indexes.json; PREBUILT_URL_BASE = where those tarballs will be served (else set
# PYSERINI_EXT_MIRROR when downloading).
PREBUILT_URL_BASE ?=
prebuilt: $(INSTALLED)
	scripts/seed_datasets.sh
	$(BIN)/python scripts/build_prebuilt.py $(if $(PREBUILT_URL_BASE),--url-base $(PREBUILT_URL_BASE))

test: $(INSTALLED)
	scripts/seed_datasets.sh
	$(PYTEST) tests

test-slow: $(INSTALLED)
	scripts/seed_datasets.sh
	$(PYTEST) tests -m slow

lint: $(INSTALLED)
	$(BIN)/ruff check pyserini_ext java_bridge tests bench scripts experiments

# every benchmark of bench/, then docs/bench-results.md and docs/scale-results.md (generated; hours at the scale sizes);
# BENCH_ARGS="--quick": tiny sizes into runs/bench-quick (a smoke run, what tests/test_bench.py runs);
# BENCH_ARGS="--corpus-encodings runs/report/full" adds whole-corpus AligneR (after make report)
BENCH_ARGS ?=
bench: $(INSTALLED)
	scripts/seed_datasets.sh
	$(BIN)/python -m bench.make_report $(BENCH_ARGS)

# every condition of pyserini_ext/repro/conditions.yaml, then docs/report.md + plots; hours of CPU, every step cached
# in runs/report (e.g. REPORT_ARGS="--datasets cranfield"); `pyserini-ext repro --check --datasets scifact` checks one
REPORT_ARGS ?=
report: $(INSTALLED)
	scripts/seed_datasets.sh
	$(BIN)/python -m pyserini_ext.repro $(REPORT_ARGS)

# retrain the three shipped models by distillation (2 h 4 min measured on 2 Xeon cores with bf16 kernels; resumable;
# models whose folder in resources/models is complete are skipped: delete a folder to retrain it)
# MODELS_ARGS: e.g. "--only deepct" or "--device cuda" (python -m pyserini_ext.train.recipes --help)
MODELS_ARGS ?=
models: $(INSTALLED)
	scripts/seed_datasets.sh
	$(BIN)/python -m pyserini_ext.train.recipes --output resources/models --work runs/models $(MODELS_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
