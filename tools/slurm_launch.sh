#!/usr/bin/env bash
# Run one of our tools on a Slurm cluster with srun (one task per GPU) and
# --launcher slurm; slurm_train.sh, slurm_test.sh, slurm_robustness.sh and
# slurm_adversarial.sh call it:
#   tools/slurm_launch.sh TOOL PARTITION JOB_NAME [TOOL args...]
# Env: GPUS (total, default 4), GPUS_PER_NODE (4), CPUS_PER_TASK (5),
# SRUN_ARGS (extra srun flags), PYTHON (default: the project's
# .venv/bin/python if there, else python), as in mmseg's slurm_*.sh.
# CPU nodes: GPUS_PER_NODE=0 asks for no GPU (no --gres) and runs TASKS
# tasks (default: GPUS), TASKS_PER_NODE a node (default: TASKS); the tasks
# form a gloo process group from Slurm's variables.
set -euo pipefail
TOOL=$1
PARTITION=$2
JOB_NAME=$3
GPUS=${GPUS:-4}
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
for name in GPUS GPUS_PER_NODE; do
  case "${!name}" in
    ''|*[!0-9]*)
      echo "$(basename "$0"): error: $name '${!name}' is not a whole number" >&2
      exit 2 ;;
  esac
done
if [ "$GPUS_PER_NODE" -gt 0 ]; then
  RESOURCES=(--gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS"
             --ntasks-per-node="$GPUS_PER_NODE")
else
  TASKS=${TASKS:-$GPUS}
  TASKS_PER_NODE=${TASKS_PER_NODE:-$TASKS}
  for name in TASKS TASKS_PER_NODE; do
    case "${!name}" in
      ''|*[!0-9]*|0)
        echo "$(basename "$0"): error: $name '${!name}' is not a positive integer (the tasks of a CPU job)" >&2
        exit 2 ;;
    esac
  done
  RESOURCES=(--ntasks="$TASKS" --ntasks-per-node="$TASKS_PER_NODE")
fi

# The interpreter: $PYTHON, else the project's .venv, else python.
. "$ROOT/tools/misc/python.sh"
export PYTHONPATH="$ROOT":${PYTHONPATH:-}
set -x
# shellcheck disable=SC2086  # SRUN_ARGS holds several flags
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    "${RESOURCES[@]}" \
    --cpus-per-task="${CPUS_PER_TASK:-5}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS:-} \
    "$PYTHON" -u "$ROOT/tools/$TOOL" --launcher=slurm "${@:4}"
