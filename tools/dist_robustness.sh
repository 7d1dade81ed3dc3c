#!/usr/bin/env bash
# The robustness grid on GPUS processes with torchrun (every cell's images
# split across them; rank 0 writes the results):
#   tools/dist_robustness.sh GPUS CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] \
#       [tools/analysis_tools/robustness.py args...]
# mmseg's dist_test.sh for tools/analysis_tools/robustness.py, with the
# process count first because the tool takes several models. Env: NNODES,
# NODE_RANK, PORT, MASTER_ADDR as in mmseg. Without CUDA the processes use
# the gloo backend on the CPU. A rerun resumes.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 GPUS CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [robustness.py args...]" >&2
  exit 2
fi
exec "$(dirname "$0")/dist_launch.sh" analysis_tools/robustness.py "$1" "${@:2}"
