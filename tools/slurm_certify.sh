#!/usr/bin/env bash
# The certification grid on a Slurm cluster with srun (one task per GPU; every
# cell's images split across the tasks; rank 0 writes the results):
#   tools/slurm_certify.sh PARTITION JOB_NAME CONFIG CHECKPOINT \
#       [CONFIG CHECKPOINT ...] [tools/analysis_tools/certify.py args...]
# mmseg's slurm_test.sh for tools/analysis_tools/certify.py, with
# --launcher slurm. Env: GPUS (total, default 4), GPUS_PER_NODE (4),
# CPUS_PER_TASK (5), SRUN_ARGS (extra srun flags), PYTHON (python).
# CPU nodes: GPUS_PER_NODE=0 with TASKS, TASKS_PER_NODE (slurm_launch.sh). A rerun resumes.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [certify.py args...]" >&2
  exit 2
fi
exec "$(dirname "$0")/slurm_launch.sh" analysis_tools/certify.py "$@"
