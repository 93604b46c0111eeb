# Set-up is part of every target: the first run creates .venv and installs everything (torch==2.13.0 first:
# it is the CPU wheel on local disk, any other request pulls a multi-GB CUDA build); later runs only
# reinstall our own package when its sources changed. Our package is installed non-editable because the
# start-up hook (pyserini_ext.pth) only ships that way.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEPS := $(VENV)/.deps-installed
INSTALLED := $(VENV)/.pyserini-ext-installed
SOURCES := $(shell find pyserini_ext java_bridge -name '*.py' 2>/dev/null) setup.cfg setup.py pyserini_ext.pth
PYTEST := $(BIN)/python -m pytest
export PYSERINI_EXT_DATA ?= $(HOME)/.cache/pyserini_ext/datasets

.PHONY: setup demo test test-slow lint bench clean

setup: $(INSTALLED)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(DEPS): setup.cfg | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q setuptools wheel
	$(BIN)/pip install -q ".[test,plot]"
	touch $@

$(INSTALLED): $(DEPS) $(SOURCES)
	$(BIN)/pip install -q --no-deps --no-build-isolation --force-reinstall .
	touch $@

demo: $(INSTALLED)
	$(BIN)/python -m pyserini_ext.demo

test: $(INSTALLED)
	$(PYTEST) tests

test-slow: $(INSTALLED)
	$(PYTEST) tests -m slow

lint: $(INSTALLED)
	$(BIN)/ruff check pyserini_ext java_bridge tests bench

bench: $(INSTALLED)
	$(BIN)/python bench/bench_aggretriever.py

clean:
	rm -rf $(VENV) build *.egg-info
