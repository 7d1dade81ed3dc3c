#!/usr/bin/env bash
# On a machine with a CUDA GPU: the CUDA tests (with the estimator's op and
# its Triton kernels), then the benchmark runs of docs/benchmark.md's "On a
# GPU" section (the ViT-T backbone at 512, batch 8, fp32 and bf16 autocast;
# the Segmenter ViT-T ADE20K segmentor at batch 1 with its attack steps), the
# kernels one forward launches with their profiler traces (fp32, bf16), and
# the backbone's inference compiled (inductor, and with CUDA graphs). About 2
# minutes on an H200 after the set-up before the op, kernels and compiled
# runs were added (estimated at 5 minutes in all; not run yet).
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
  tests/test_benchmark/test_memory.py tests/test_models/test_attention/test_fused.py \
  2>&1 | tee "$OUT/cuda_tests.log" | tail -3
"${BENCH[@]}" --batch-size 8 --work-dir "$OUT/backbone_fp32"
"${BENCH[@]}" --batch-size 8 --amp --work-dir "$OUT/backbone_bf16"
"${BENCH[@]}" "$SEG" --whole-model --attack-sizes 512 --batch-size 1 --work-dir "$OUT/segmentor"
for amp in "" --amp; do
  "$PY" tools/analysis_tools/profile_kernels.py --device cuda --batch-size 8 $amp \
    --work-dir "$OUT/kernels${amp:+_bf16}"
done
for mode in default reduce-overhead; do
  timeout 150 "${BENCH[@]}" --batch-size 8 --train-sizes --rounds 5 --memory none \
    --compile --compile-mode "$mode" --work-dir "$OUT/backbone_compiled_$mode"
done
