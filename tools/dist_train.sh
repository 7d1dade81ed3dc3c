#!/usr/bin/env bash
# Train on GPUS processes of this node (or of NNODES nodes) with torchrun:
#   tools/dist_train.sh CONFIG GPUS [tools/train.py args...]
# mmseg's own dist_train.sh, calling our tools/train.py (plugin loaded). Env:
# NNODES, NODE_RANK, PORT, MASTER_ADDR as in mmseg. Without CUDA the processes
# use the gloo backend on the CPU (GPUS is then the number of processes).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 CONFIG GPUS [tools/train.py args...]" >&2
  exit 2
fi
exec "$(dirname "$0")/dist_launch.sh" train.py "$2" "$1" "${@:3}"
