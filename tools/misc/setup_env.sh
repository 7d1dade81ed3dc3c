#!/usr/bin/env bash
# Create (or top up) the project venv with everything mmseg-elliptical needs.
#
# Idempotent: every step is skipped when what it installs is already there, so
# running it a second time takes a few seconds.
#
# Environment:
#   VENV        venv folder (default: .venv in the project root)
#   PYTHON      interpreter used to create the venv (default: python3)
#   WHEELHOUSE  optional folder of prebuilt wheels (e.g. ../shared/wheels holding
#               mmcv-2.1.0 built for torch 2.13.0); passed to pip as --find-links
#   EXTRAS      package extras to install (default: tests,robustness,lint,mmdet,deploy,tensorboard)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-tests,robustness,lint,mmdet,deploy,tensorboard}"

FIND_LINKS=()
if [ -n "${WHEELHOUSE:-}" ]; then
  if [ -d "$WHEELHOUSE" ]; then
    FIND_LINKS=(--find-links "$WHEELHOUSE")
  else
    echo "setup_env: WHEELHOUSE=$WHEELHOUSE is not a folder; ignoring it" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_env: creating venv at $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check -q)
# This machine's pip config lists local indexes that may be absent: hide pip's
# "Location ... is ignored" noise, keep every other message.
pip_install() { "${PIP[@]}" "$@" 2> >(grep -v "^WARNING: Location 'file:" >&2); }

have() { "$PY" - "$@" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    if version(name).split("+")[0] != want:
        sys.exit(1)
PYEOF
}

# 1. Build tools and a CPU torch. torch is pinned: unpinned, pip resolves a CUDA build.
if ! have torch==2.13.0 setuptools==80.9.0 || ! "$PY" -c "import wheel, ninja" 2>/dev/null; then
  echo "setup_env: installing torch==2.13.0 and build tools"
  pip_install "torch==2.13.0" "setuptools==80.9.0" wheel ninja
fi

# 2. mmcv with its compiled ops (mmseg imports mmcv.ops). Built against the venv's
#    torch (no build isolation); ~15 min without a wheelhouse, pip caches the wheel.
if ! "$PY" -c "import mmcv, mmcv._ext; assert mmcv.__version__ == '2.1.0'" 2>/dev/null; then
  echo "setup_env: installing mmcv==2.1.0 with compiled ops (slow without a wheelhouse)"
  pip_install --no-build-isolation "${FIND_LINKS[@]}" "mmcv==2.1.0" "torch==2.13.0"
fi

# 3. OpenMMLab stack and the modules mmseg imports without declaring them.
if ! have mmengine==0.10.7 mmsegmentation==1.2.2 || ! "$PY" -c "import ftfy, regex, cv2" 2>/dev/null; then
  echo "setup_env: installing mmengine, mmsegmentation and their undeclared imports"
  pip_install "${FIND_LINKS[@]}" "torch==2.13.0" "setuptools==80.9.0" "mmcv==2.1.0" \
    "mmengine==0.10.7" "mmsegmentation==1.2.2" ftfy regex opencv-python
fi

# 4. This package (editable) with its extras. Re-run when setup.py changes.
STAMP="$VENV/.mmseg_elliptical.stamp"
WANT="$(cat "$ROOT/setup.py" | sha256sum | cut -c1-16)-$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ] || ! "$PY" -c "import mmseg_elliptical" 2>/dev/null; then
  echo "setup_env: installing mmseg_elliptical (editable) with extras [$EXTRAS]"
  pip_install "${FIND_LINKS[@]}" --no-build-isolation -e "$ROOT[$EXTRAS]" "torch==2.13.0" "setuptools==80.9.0"
  echo "$WANT" > "$STAMP"
fi
echo "setup_env: ready ($VENV)"
