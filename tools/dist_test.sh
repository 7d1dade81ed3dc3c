#!/usr/bin/env bash
# Test a checkpoint on GPUS processes with torchrun:
#   tools/dist_test.sh CONFIG CHECKPOINT GPUS [tools/test.py args...]
# mmseg's own dist_test.sh, calling our tools/test.py (plugin loaded). Env:
# NNODES, NODE_RANK, PORT, MASTER_ADDR as in mmseg. Without CUDA the processes
# use the gloo backend on the CPU.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 CONFIG CHECKPOINT GPUS [tools/test.py args...]" >&2
  exit 2
fi
exec "$(dirname "$0")/dist_launch.sh" test.py "$3" "$1" "$2" "${@:4}"
