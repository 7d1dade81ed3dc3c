"""Train a segmentor: mmseg's own `tools/train.py`, mmseg-elliptical loaded.

Every flag of mmseg's script works unchanged; see `python tools/train.py -h`.
A bad command line is refused before torch and mmseg are imported.
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import sys

from mmseg_elliptical.utils.mmseg_tools import check_mmseg_tool_command

if __name__ == '__main__':
    check_mmseg_tool_command('train.py', sys.argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.engine import run_mmseg_tool
    run_mmseg_tool('train.py')
