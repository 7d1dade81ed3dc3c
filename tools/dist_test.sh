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
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
PYTHON=${PYTHON:-python}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PYTHONPATH="$ROOT":${PYTHONPATH:-} \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$ROOT/tools/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "${@:4}"
