# Sourced by tools/dist_launch.sh and slurm_launch.sh (with ROOT set): the
# interpreter is $PYTHON if set, else the project's .venv (make demo's), else
# python; said on stderr.
if [ -n "${PYTHON:-}" ]; then
  FROM="\$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then
  PYTHON="$ROOT/.venv/bin/python"
  FROM="the project's .venv"
else
  PYTHON=python
  FROM="no $ROOT/.venv; set PYTHON to choose"
fi
echo "$(basename "$0"): using $PYTHON ($FROM)" >&2
