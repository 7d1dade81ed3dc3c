#!/usr/bin/env python
"""Check a tool's command line in this one process, without running it.

``tools/dist_launch.sh`` runs this before torchrun starts NPROC copies of
the tool, so that a bad argument ends the job with the tool's own one-line
error and status 2, not with one error per process and torchrun's
``ChildFailedError`` traceback::

    python tools/check_args.py TOOL [TOOL args...]

TOOL is a path under ``tools/`` (``train.py``, ``test.py``,
``analysis_tools/robustness.py``, ...): its ``main(argv, check_only=True)``
runs its checks and stops. Nothing is built or loaded beyond what they
read; as the tools, it refuses a bad argument before torch and mmseg are
imported.
"""
__check_arguments_first__ = True  # the tools' checks import the plugin

import os.path as osp
import runpy
import sys

from mmseg_elliptical.utils import preflight

TOOLS = osp.dirname(osp.abspath(__file__))


def main(argv) -> None:
    """Check ``argv`` = ``[TOOL, args...]``; exit 2 on a bad one."""
    if not argv:
        sys.exit('usage: check_args.py TOOL [TOOL args...]')
    path = osp.join(TOOLS, argv[0])
    if not osp.isfile(path):
        sys.stderr.write(f'check_args.py: error: no tool {argv[0]} under '
                         f'{TOOLS}\n')
        raise SystemExit(2)
    sys.argv = [path, *argv[1:]]
    tool = runpy.run_path(path, run_name='check_args')
    if 'main' not in tool:
        raise SystemExit(f'{argv[0]} has no main to check')
    # torchrun starts the tool next: its environment is not there yet.
    with preflight.launching():
        tool['main'](argv[1:], check_only=True)


if __name__ == '__main__':
    main(sys.argv[1:])
