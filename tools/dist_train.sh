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
CONFIG=$1
GPUS=$2
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
    "$ROOT/tools/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
