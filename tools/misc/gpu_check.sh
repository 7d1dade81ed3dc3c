#!/usr/bin/env bash
# On a machine with a CUDA GPU, in one command and at most GPU_CHECK_SECONDS
# (default 280 s; a step past it gets 10 s more to end): the CUDA tests (with the
# estimator's op, its Triton kernels and their self-check; not the slow
# ones: those run on the CPU), then the benchmark runs of docs/benchmark.md's
# "On a GPU" section (the ViT-T backbone at 512, batch 8, fp32 and bf16
# autocast; the kernels one forward launches with their profiler traces,
# fp32 and bf16; the Segmenter ViT-T ADE20K segmentor at batch 1 with its
# attack steps; the backbone's inference compiled, inductor and with CUDA
# graphs), in that order. Each step runs under `timeout`: its own cap or
# what is left of the budget, whichever is less; a step with under 20 s left
# is skipped. Not run on a GPU yet in this form.
#
#   bash tools/misc/gpu_check.sh [OUT]
#
# OUT: the reports' folder (default: $OUT where it is set, as on the device
# machines, else work_dirs/gpu_check). OUT/summary.md, written however the
# run ends: each step's status and seconds, the tests' result, any fallback
# of the op to its composite (the self-check's warning), and every ratio of
# each benchmark run (each list of ratio rows in its benchmark.json, every
# field) and the kernel counts; each step's output is in OUT/<step>.log,
# its reports in OUT/<step>/.
#
# PYTHON (default: .venv/bin/python, else python3) is the interpreter.
set -uo pipefail
START=$SECONDS
OUT="${1:-${OUT:-work_dirs/gpu_check}}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
"$PY" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" || {
  echo "gpu_check: torch sees no CUDA GPU here; run it on a machine with one" >&2; exit 2; }
mkdir -p "$OUT"
BUDGET="${GPU_CHECK_SECONDS:-280}"
STEPS="$OUT/steps.tsv"
CURRENT=
: > "$STEPS"

summary() {  # OUT/summary.md from the steps, the logs and the reports
  [ -n "$CURRENT" ] && printf '%s\tinterrupted\t%s\n' "$CURRENT" "$((SECONDS - START))" >> "$STEPS"
  "$PY" - "$OUT" "$((SECONDS - START))" "$BUDGET" <<'PYTHON' || echo "gpu_check: no summary" >&2
import glob, json, os, re, sys

out, spent, budget = sys.argv[1], sys.argv[2], sys.argv[3]
steps = [line.rstrip('\n').split('\t') for line in open(os.path.join(out, 'steps.tsv'))]
lines = [f'# gpu_check: {spent} s of {budget}', '', '| step | status | seconds |',
         '|---|---|---:|'] + [f'| {n} | {s} | {t} |' for n, s, t in steps]


def log(name):
    path = os.path.join(out, f'{name}.log')
    return open(path, errors='replace').read() if os.path.exists(path) else ''


tests = re.findall(r'^=*\s*(\d+ (?:passed|failed|error).*?)\s*=*$', log('cuda_tests'), re.M)
lines += ['', f"Tests: {tests[-1] if tests else 'no result line'}", '']
fallbacks = sorted({m for n, *_ in steps for m in re.findall(
    r'mmseg_elliptical::relevance: .*', log(n))})
lines += ['Fallbacks of the op to its composite: ' + ('none logged' if not fallbacks else 'see below')]
lines += [f'- {f}' for f in fallbacks]


def cell(value):
    return f'{value:.3f}' if isinstance(value, float) else '' if value is None else str(value)


for name, *_ in steps:
    path = os.path.join(out, name, 'benchmark.json')
    if os.path.exists(path):
        report = json.load(open(path))
        meta = report.get('meta', {})
        lines += ['', f'## {name}', '', f"`{meta.get('command', '')}` on "
                  f"{meta.get('device_name', '?')}, torch {meta.get('torch', '?')}"]
        for key, rows in report.items():  # every list of ratio rows
            rows = [r for r in rows or [] if isinstance(r, dict) and 'time' in r] \
                if isinstance(rows, list) else []
            if rows:
                cols = [c for c in dict.fromkeys(k for r in rows for k in r)
                        if not isinstance(rows[0].get(c), (list, dict))]
                lines += ['', f'{key}:', '', '| ' + ' | '.join(cols) + ' |',
                          '|' + '---|' * len(cols)]
                lines += ['| ' + ' | '.join(cell(r.get(c)) for c in cols) + ' |' for r in rows]
    kernels = os.path.join(out, name, 'kernels.md')
    if os.path.exists(kernels):
        lines += ['', f'## {name}', '', open(kernels).read().strip()]
open(os.path.join(out, 'summary.md'), 'w').write('\n'.join(lines) + '\n')
print(f'gpu_check: wrote {os.path.join(out, "summary.md")}')
PYTHON
}
trap summary EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() {  # step NAME CAP COMMAND...: COMMAND > OUT/NAME.log, at most CAP s
  local name=$1 cap=$2 left rc status t0=$SECONDS
  shift 2
  left=$((BUDGET - (SECONDS - START)))
  if ((left < 20)); then
    printf '%s\tskipped: %s s of the budget left\t0\n' "$name" "$left" >> "$STEPS"
    return
  fi
  ((cap > left)) && cap=$left
  echo "gpu_check: $name (at most $cap s)"
  CURRENT=$name
  timeout -k 10 "$cap" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  CURRENT=
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after $cap s" ;;
    *) status="failed: exit status $rc" ;;
  esac
  printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - t0))" >> "$STEPS"
  tail -n 2 "$OUT/$name.log"
}

BENCH=("$PY" tools/analysis_tools/benchmark.py --device cuda --sizes 512 --rounds 10 --threads 0)
SEG=configs/segmenter/segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py
step cuda_tests 90 "$PY" -m pytest -q -p no:cacheprovider -m "not slow" \
  tests/test_models/test_cuda.py tests/test_benchmark/test_memory.py \
  tests/test_models/test_attention/test_fused.py
step backbone_fp32 60 "${BENCH[@]}" --batch-size 8 --work-dir "$OUT/backbone_fp32"
step backbone_bf16 60 "${BENCH[@]}" --batch-size 8 --amp --work-dir "$OUT/backbone_bf16"
for amp in "" --amp; do
  step "kernels${amp:+_bf16}" 40 "$PY" tools/analysis_tools/profile_kernels.py --device cuda \
    --batch-size 8 $amp --work-dir "$OUT/kernels${amp:+_bf16}"
done
step segmentor 75 "${BENCH[@]}" "$SEG" --whole-model --attack-sizes 512 --batch-size 1 \
  --work-dir "$OUT/segmentor"
for mode in default reduce-overhead; do
  step "backbone_compiled_$mode" 90 "${BENCH[@]}" --batch-size 8 --train-sizes --rounds 5 \
    --memory none --compile --compile-mode "$mode" --work-dir "$OUT/backbone_compiled_$mode"
done
