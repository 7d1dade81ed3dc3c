#!/usr/bin/env bash
# Train on a Slurm cluster with srun (one task per GPU):
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG [tools/train.py args...]
# mmseg's own slurm_train.sh, calling our tools/train.py (plugin loaded) with
# --launcher slurm. Env: GPUS (total, default 4), GPUS_PER_NODE (4),
# CPUS_PER_TASK (5), SRUN_ARGS (extra srun flags), PYTHON (see slurm_launch.sh).
# CPU nodes: GPUS_PER_NODE=0 with TASKS, TASKS_PER_NODE (slurm_launch.sh).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG [tools/train.py args...]" >&2
  exit 2
fi
exec "$(dirname "$0")/slurm_launch.sh" train.py "$@"
