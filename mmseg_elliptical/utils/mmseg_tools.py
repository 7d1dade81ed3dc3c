"""Run mmseg's own command-line tools with the plugin loaded."""
import os.path as osp
import runpy

import mmseg


def mmseg_tool_path(name: str) -> str:
    """Path of a script that mmseg ships under ``mmseg/.mim/tools``.

    Args:
        name (str): Path relative to the tools folder, e.g. ``'train.py'``.

    Returns:
        str: The absolute path.
    """
    path = osp.join(osp.dirname(mmseg.__file__), '.mim', 'tools', name)
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'mmseg {mmseg.__version__} does not ship tools/{name} at {path}; '
            'install mmsegmentation==1.2.2 from PyPI (its wheel carries the '
            'tools).')
    return path


def run_mmseg_tool(name: str) -> None:
    """Execute mmseg's ``tools/<name>`` as ``__main__`` (reads ``sys.argv``).

    Importing this package first registers the plugin's components and the
    checkpoint globals that ``torch.load(weights_only=True)`` must accept.
    """
    import mmseg_elliptical  # noqa: F401
    runpy.run_path(mmseg_tool_path(name), run_name='__main__')
