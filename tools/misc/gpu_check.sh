#!/usr/bin/env bash
# On a machine with a CUDA GPU: the CUDA tests, then the benchmark runs of
# docs/benchmark.md's "On a GPU" section (the ViT-T backbone at 512, batch 8,
# fp32 and bf16 autocast; the Segmenter ViT-T ADE20K segmentor at batch 1
# with its attack steps). About 2 minutes on an H200 after the set-up.
#
#   bash tools/misc/gpu_check.sh [OUT]     reports into OUT (default work_dirs/gpu_check)
#
# PYTHON (default: .venv/bin/python, else python3) is the interpreter.
set -uo pipefail
OUT="${1:-work_dirs/gpu_check}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
"$PY" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" || {
  echo "gpu_check: torch sees no CUDA GPU here; run it on a machine with one" >&2; exit 2; }
mkdir -p "$OUT"
BENCH=("$PY" tools/analysis_tools/benchmark.py --device cuda --sizes 512 --rounds 10 --threads 0)
SEG=configs/segmenter/segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py
"$PY" -m pytest -q -p no:cacheprovider tests/test_models/test_cuda.py \
  tests/test_benchmark/test_memory.py 2>&1 | tee "$OUT/cuda_tests.log" | tail -3
"${BENCH[@]}" --batch-size 8 --work-dir "$OUT/backbone_fp32"
"${BENCH[@]}" --batch-size 8 --amp --work-dir "$OUT/backbone_bf16"
"${BENCH[@]}" "$SEG" --whole-model --attack-sizes 512 --batch-size 1 --work-dir "$OUT/segmentor"
