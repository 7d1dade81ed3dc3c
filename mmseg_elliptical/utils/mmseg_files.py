"""Find and run what mmseg's wheel ships under ``mmseg/.mim``."""
import os.path as osp

import mmseg


def _mim_file(folder: str, name: str) -> str:
    path = osp.join(osp.dirname(mmseg.__file__), '.mim', folder, name)
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'mmseg {mmseg.__version__} does not ship {folder}/{name} at '
            f'{path}; install mmsegmentation==1.2.2 from PyPI (its wheel '
            f'carries the {folder}).')
    return path


def mmseg_tool_path(name: str) -> str:
    """Path of a script that mmseg ships under ``mmseg/.mim/tools``.

    Args:
        name (str): Path relative to the tools folder, e.g. ``'train.py'``.

    Returns:
        str: The absolute path.
    """
    return _mim_file('tools', name)


def mmseg_config_path(name: str) -> str:
    """Path of an mmseg config, e.g. ``'segmenter/segmenter_vit-t_...py'``.

    Accepts the ``mmseg::`` prefix used in ``_base_`` lists.

    Args:
        name (str): Config path relative to mmseg's ``configs`` folder.

    Returns:
        str: The absolute path.
    """
    return _mim_file('configs', name.split('::', 1)[-1])
