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
#   EXTRAS      package extras to install (default: tests,robustness,lint,mmdet,deploy,tensorboard,cluster,triton)
#   MMCV        lite, full or auto (default): which mmcv. auto is full with a
#               CUDA build of torch, else lite. lite: mmcv-lite plus a start-up
#               hook standing in for the compiled mmcv._ext (no compile,
#               tools/misc/mmcv_ext_standin.py); full: mmcv with its compiled
#               ops (~15 min of compiling without a wheelhouse). Switching an
#               existing venv uninstalls the other one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-tests,robustness,lint,mmdet,deploy,tensorboard,cluster,triton}"
MMCV="${MMCV:-auto}"
case "$MMCV" in
  auto|lite|full) ;;
  *) echo "setup_env: MMCV=$MMCV is not lite, full or auto; give one of them" >&2; exit 2 ;;
esac

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

# 2. mmcv: mmcv-lite and the stand-in for its compiled ops, or full mmcv.
if [ "$MMCV" = auto ]; then
  MMCV=lite
  "$PY" -c "import sys, torch; sys.exit(torch.version.cuda is None)" 2>/dev/null && MMCV=full
fi
SITE="$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
installed() { "$PY" -c "from importlib.metadata import version; version('$1')" 2>/dev/null; }
if [ "$MMCV" = lite ]; then
  OTHER=mmcv; MMCV_REQ="mmcv-lite==2.1.0"
else
  OTHER=mmcv-lite; MMCV_REQ="mmcv==2.1.0"
fi
REINSTALL=()  # both were installed: ours lost files with the other's
PIN_TORCH=("torch==2.13.0")
if installed "$OTHER"; then
  # Both install the package mmcv/: remove the other, then reinstall ours.
  echo "setup_env: uninstalling $OTHER for MMCV=$MMCV"
  "$PY" -m pip uninstall --disable-pip-version-check -q -y "$OTHER"
  installed "${MMCV_REQ%%==*}" && REINSTALL=(--force-reinstall --no-deps) && PIN_TORCH=()
fi
if [ "$MMCV" = lite ]; then
  if [ ${#REINSTALL[@]} -gt 0 ] || ! have mmcv-lite==2.1.0; then
    echo "setup_env: installing mmcv-lite==2.1.0 (MMCV=full for the compiled ops)"
    pip_install "${REINSTALL[@]}" "${FIND_LINKS[@]}" "mmcv-lite==2.1.0"
  fi
  if ! cmp -s "$ROOT/tools/misc/mmcv_ext_standin.py" "$SITE/mmseg_elliptical_mmcv_ext.py" || \
      [ ! -f "$SITE/mmseg_elliptical_mmcv_ext.pth" ]; then
    echo "setup_env: installing the start-up hook standing in for mmcv._ext"
    "$PY" "$ROOT/tools/misc/mmcv_ext_standin.py" install "$SITE"
  fi
else
  "$PY" "$ROOT/tools/misc/mmcv_ext_standin.py" remove "$SITE"
  # Built against the venv's torch (no build isolation); ~15 min without a
  # wheelhouse, pip caches the wheel.
  if [ ${#REINSTALL[@]} -gt 0 ] || \
      ! "$PY" -c "import mmcv, mmcv._ext; assert mmcv.__version__ == '2.1.0'" 2>/dev/null; then
    echo "setup_env: installing mmcv==2.1.0 with compiled ops (slow without a wheelhouse)"
    pip_install "${REINSTALL[@]}" --no-build-isolation "${FIND_LINKS[@]}" "mmcv==2.1.0" "${PIN_TORCH[@]}"
  fi
fi

# 3. OpenMMLab stack and the modules mmseg imports without declaring them.
if ! have mmengine==0.10.7 mmsegmentation==1.2.2 || ! "$PY" -c "import ftfy, regex, cv2" 2>/dev/null; then
  echo "setup_env: installing mmengine, mmsegmentation and their undeclared imports"
  pip_install "${FIND_LINKS[@]}" "torch==2.13.0" "setuptools==80.9.0" "$MMCV_REQ" \
    "mmengine==0.10.7" "mmsegmentation==1.2.2" ftfy regex opencv-python
fi

# 4. This package (editable) with its extras. Re-run when setup.py or MMCV
#    changes (setup.py requires the mmcv that is installed).
STAMP="$VENV/.mmseg_elliptical.stamp"
WANT="$(cat "$ROOT/setup.py" | sha256sum | cut -c1-16)-$EXTRAS-$MMCV"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ] || ! "$PY" -c "import mmseg_elliptical" 2>/dev/null; then
  echo "setup_env: installing mmseg_elliptical (editable) with extras [$EXTRAS]"
  pip_install "${FIND_LINKS[@]}" --no-build-isolation -e "$ROOT[$EXTRAS]" "torch==2.13.0" "setuptools==80.9.0"
  echo "$WANT" > "$STAMP"
fi
echo "setup_env: ready ($VENV, MMCV=$MMCV) in ${SECONDS} s"
