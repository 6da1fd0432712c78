# dcnconvert: developer entry points. `make test` is the test command (CI calls it).
PYTHON ?= python3
NVCC ?= nvcc
export PYTHON NVCC

.PHONY: help test test-all test-deps samples core plugin plugin-rtx harness clean lint bench ci

help:
	@echo "make test      run the test suite (CPU-only tests; GPU/TensorRT tests skip with a reason);"
	@echo "               installs the test requirements (the dev extra) first if pytest is missing"
	@echo "make samples   regenerate sample_models/ bit-for-bit"
	@echo "make core      build the TensorRT-free CUDA core (build/libdcnconvert_core.so)"
	@echo "make plugin    build the TensorRT plugin into dcnconvert/_lib/ (needs TensorRT headers)"
	@echo "make plugin-rtx  build the TensorRT-RTX plugin into dcnconvert/_lib/rtx1 (TensorRT 11 headers)"
	@echo "make harness   build the C++ harness that drives the plugin as TensorRT does"
	@echo "make lint      ruff over the package, tests and bench"
	@echo "make bench     time 'dcnconvert rewrite' on a ~1 GB synthetic model (docs/rewrite_large.md)"
	@echo "make ci        what CI runs: .ci/run (fresh venv, install, make test)"
	@echo "make clean     remove build outputs"

test: test-deps
	$(PYTHON) -m pytest -q

test-all: test-deps
	$(PYTHON) -m pytest -q -m ""

# The test requirements (the `dev` extra) when pytest is missing, e.g. right after `pip install -e .`.
# Where pip cannot install (an externally managed system Python, no pip), one line says what to run.
DEV_INSTALL = $(PYTHON) -m pip install -e '.[dev]'
test-deps:
	@$(PYTHON) -c 'import pytest' 2>/dev/null || { \
	  echo "make test: pytest is missing; installing the test requirements: $(DEV_INSTALL)"; \
	  $(DEV_INSTALL) --quiet >/dev/null 2>&1 || { \
	    echo "make test: pip could not install them into this Python; in a virtual environment run:" \
	      "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && make test" >&2; \
	    exit 1; }; }

lint:
	$(PYTHON) -m ruff check dcnconvert tests bench sample_models

bench:
	$(PYTHON) bench/rewrite_large.py

ci:
	bash .ci/run

samples:
	$(PYTHON) sample_models/generate.py

core plugin plugin-rtx harness:
	$(MAKE) -C plugin_src $@

clean:
	$(MAKE) -C plugin_src clean
	rm -rf build .pytest_cache
