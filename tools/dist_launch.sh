#!/usr/bin/env bash
# Run one of our tools on NPROC processes of this node (or of NNODES nodes)
# with torchrun and --launcher pytorch; dist_train.sh and dist_test.sh call it:
#   tools/dist_launch.sh TOOL NPROC [TOOL args...]
# (TOOL: train.py, test.py, analysis_tools/robustness.py, ...)
# Env: NNODES, NODE_RANK, PORT, MASTER_ADDR as in mmseg's dist_*.sh; PYTHON
# (default: the project's .venv/bin/python if there, else python).
# Without CUDA the processes use the gloo backend on the CPU. torchrun
# replaces this shell (exec), so a signal sent to the job (kill, a scheduler)
# reaches torchrun, which stops its workers.
set -euo pipefail
TOOL=$1
NPROC=$2
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

case "$NPROC" in
  ''|*[!0-9]*|0)
    echo "$(basename "$0"): error: NPROC '$NPROC' is not a positive integer (the processes per node, e.g. 8)" >&2
    exit 2 ;;
esac

# The interpreter: $PYTHON, else the project's .venv, else python.
. "$ROOT/tools/misc/python.sh"
export PYTHONPATH="$ROOT":${PYTHONPATH:-}
# The command line checked once, here, before NPROC processes start (a bad
# argument: the tool's one-line error and status 2, no torchrun traceback);
# MMSEG_ELLIPTICAL_SKIP_CHECK=1 skips it.
if [ "${MMSEG_ELLIPTICAL_SKIP_CHECK:-0}" != 1 ]; then
  "$PYTHON" "$ROOT/tools/check_args.py" "$TOOL" --launcher pytorch "${@:3}"
fi
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" \
    --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --nproc_per_node="$NPROC" \
    --master_port="${PORT:-29500}" \
    "$ROOT/tools/$TOOL" --launcher pytorch "${@:3}"
