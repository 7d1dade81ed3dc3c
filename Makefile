# Two commands do everything on a fresh machine (each installs what is missing
# into .venv first, and skips what is already there):
#   make demo   train the elliptical demo segmentor on the embedded demo data
#   make test   run the test suite
#   make benchmark   ViT-T 512 backbone vs its dot-product baselines
#                    (BENCHMARK_ARGS=... for other configs and options)
# Optional: WHEELHOUSE=DIR points pip at prebuilt wheels (e.g. an mmcv 2.1.0
# wheel built for torch 2.13.0) so mmcv need not be compiled (~15 min).
PYTHON ?= python3
VENV ?= .venv
WHEELHOUSE ?=
DEMO_CONFIG ?= configs/demo/segmenter_elliptical-vit-t_mask_1xb8-600iter_demo-shapes-64x64.py
DEMO_DOT_CONFIG ?= configs/demo/segmenter_vit-t_mask_1xb8-600iter_demo-shapes-64x64.py
BENCHMARK_ARGS ?= --saved-tensors --rounds 20
PY := $(VENV)/bin/python

.PHONY: setup demo demo-dot test benchmark

setup:
	@PYTHON="$(PYTHON)" VENV="$(abspath $(VENV))" WHEELHOUSE="$(WHEELHOUSE)" bash tools/setup_env.sh

demo: setup
	$(PY) tools/train.py $(DEMO_CONFIG) --work-dir work_dirs/demo_elliptical

demo-dot: setup
	$(PY) tools/train.py $(DEMO_DOT_CONFIG) --work-dir work_dirs/demo_dot

test: setup
	$(PY) -m pytest -q

benchmark: setup
	$(PY) tools/benchmark.py $(BENCHMARK_ARGS) --out-dir work_dirs/benchmark
