#!/usr/bin/env bash
# Run one of our tools on a Slurm cluster with srun (one task per GPU) and
# --launcher slurm; slurm_train.sh and slurm_test.sh call it:
#   tools/slurm_launch.sh TOOL PARTITION JOB_NAME [TOOL args...]
# Env: GPUS (total, default 4), GPUS_PER_NODE (4), CPUS_PER_TASK (5),
# SRUN_ARGS (extra srun flags), PYTHON (default: the project's
# .venv/bin/python if there, else python), as in mmseg's slurm_*.sh.
# mmengine's slurm launcher needs CUDA devices.
set -euo pipefail
set -x
TOOL=$1
PARTITION=$2
JOB_NAME=$3
GPUS=${GPUS:-4}
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# The interpreter: $PYTHON, else the project's .venv, else python.
. "$ROOT/tools/misc/python.sh"
export PYTHONPATH="$ROOT":${PYTHONPATH:-}
# shellcheck disable=SC2086  # SRUN_ARGS holds several flags
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="${CPUS_PER_TASK:-5}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS:-} \
    "$PYTHON" -u "$ROOT/tools/$TOOL" --launcher=slurm "${@:4}"
