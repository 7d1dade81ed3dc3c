#!/usr/bin/env bash
# The certification grid on GPUS processes with torchrun (every cell's images
# split across them; rank 0 writes the results):
#   tools/dist_certify.sh GPUS CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] \
#       [tools/analysis_tools/certify.py args...]
# mmseg's dist_test.sh for tools/analysis_tools/certify.py, with the
# process count first because the tool takes several models. Env: NNODES,
# NODE_RANK, PORT, MASTER_ADDR as in mmseg. Without CUDA the processes use
# the gloo backend on the CPU. A rerun resumes.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 GPUS CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [certify.py args...]" >&2
  exit 2
fi
exec "$(dirname "$0")/dist_launch.sh" analysis_tools/certify.py "$1" "${@:2}"
