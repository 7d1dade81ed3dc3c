"""Train a segmentor: mmseg's own `tools/train.py`, mmseg-elliptical loaded.

Every flag of mmseg's script works unchanged; see `python tools/train.py -h`.
A bad command line is refused before torch and mmseg are imported.
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import sys
from typing import Optional, Sequence

from mmseg_elliptical.utils.mmseg_tools import check_mmseg_tool_command


def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> None:
    """Run mmseg's train.py on ``argv`` (default: ``sys.argv[1:]``);
    ``check_only``: stop after the checks (``tools/check_args.py``)."""
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    check_mmseg_tool_command('train.py', sys.argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.engine.launch import (check_mmseg_tool_args,
                                                run_mmseg_tool)
    if check_only:
        check_mmseg_tool_args('train.py', sys.argv)
    else:
        run_mmseg_tool('train.py')


if __name__ == '__main__':
    main()
