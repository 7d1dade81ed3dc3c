#!/usr/bin/env python
"""Check a tool's command line in this one process, without running it.

``tools/dist_launch.sh`` runs this before torchrun starts NPROC copies of
the tool, so that a bad argument ends the job with the tool's own one-line
error and status 2, not with one error per process and torchrun's
``ChildFailedError`` traceback::

    python tools/check_args.py TOOL [TOOL args...]

TOOL is a path under ``tools/`` (``train.py``, ``test.py``,
``analysis_tools/robustness.py``, ...). Nothing is built or loaded beyond
what the tool's own checks read; as the tools, it refuses a bad argument
before torch and mmseg are imported.
"""
__check_arguments_first__ = True  # the tools' checks import the plugin

import os.path as osp
import runpy
import sys

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
    # torchrun starts the tool next: its environment is not there yet.
    from mmseg_elliptical.utils import preflight
    preflight.LAUNCHING = True
    if argv[0] in ('train.py', 'test.py'):
        from mmseg_elliptical.utils import mmseg_tools
        mmseg_tools.check_mmseg_tool_command(argv[0], sys.argv)
        import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
        from mmseg_elliptical.engine.launch import check_mmseg_tool_args
        check_mmseg_tool_args(argv[0], sys.argv)
        return
    parse_args = runpy.run_path(path, run_name='check_args').get('parse_args')
    if parse_args is None:
        raise SystemExit(f'{argv[0]} has no parse_args to check')
    parse_args(argv[1:])


if __name__ == '__main__':
    main(sys.argv[1:])
