# dcnconvert: developer entry points. `make test` is the test command (CI calls it).
PYTHON ?= python3
NVCC ?= nvcc
export PYTHON NVCC

.PHONY: help test test-all samples core plugin harness clean

help:
	@echo "make test      run the test suite (CPU-only tests; GPU/TensorRT tests skip with a reason)"
	@echo "make samples   regenerate sample_models/ bit-for-bit"
	@echo "make core      build the TensorRT-free CUDA core (build/libdcnconvert_core.so)"
	@echo "make plugin    build the TensorRT plugin into dcnconvert/_lib/ (needs TensorRT headers)"
	@echo "make harness   build the C++ harness that drives the plugin as TensorRT does"
	@echo "make clean     remove build outputs"

test:
	$(PYTHON) -m pytest -q

test-all:
	$(PYTHON) -m pytest -q -m ""

samples:
	$(PYTHON) sample_models/generate.py

core plugin harness:
	$(MAKE) -C plugin_src $@

clean:
	$(MAKE) -C plugin_src clean
	rm -rf build .pytest_cache
