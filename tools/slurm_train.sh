#!/usr/bin/env bash
# Train on a Slurm cluster with srun (one task per GPU):
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG [tools/train.py args...]
# mmseg's own slurm_train.sh, calling our tools/train.py (plugin loaded) with
# --launcher slurm. Env: GPUS (total, default 4), GPUS_PER_NODE (4),
# CPUS_PER_TASK (5), SRUN_ARGS (extra srun flags), PYTHON (python).
# mmengine's slurm launcher needs CUDA devices.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG [tools/train.py args...]" >&2
  exit 2
fi
set -x

PARTITION=$1
JOB_NAME=$2
CONFIG=$3
GPUS=${GPUS:-4}
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
PYTHON=${PYTHON:-python}
PY_ARGS=("${@:4}")
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# shellcheck disable=SC2086  # SRUN_ARGS holds several flags
PYTHONPATH="$ROOT":${PYTHONPATH:-} \
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    "$PYTHON" -u "$ROOT/tools/train.py" "$CONFIG" --launcher=slurm "${PY_ARGS[@]}"
