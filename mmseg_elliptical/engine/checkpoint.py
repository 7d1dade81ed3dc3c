"""Let mmengine read its own checkpoints under torch's ``weights_only`` loader.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True``, which
refuses the non-tensor objects mmengine 0.10 stores in its checkpoints (the
message hub's ``HistoryBuffer``, the numpy arrays and scalars inside it, and
the bound methods it pickles through ``getattr``). ``tools/test.py``,
``--resume`` and ``mmseg.apis.init_model`` then fail with ``Unsupported
global``. Instead of switching the safe loader off for the whole process
(``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``), the plugin replaces mmengine's
local-file checkpoint loader by one that keeps ``weights_only=True`` and allows
exactly these globals, for the duration of that one load.

This is the one side effect of ``import mmseg_elliptical`` besides registering
modules: :func:`register_checkpoint_loader` runs at import (logged once), so
it also works for mmseg's own tools through a config's ``custom_imports``.
Set the environment variable ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER=0`` before
the import to keep mmengine's loader, or call
:func:`unregister_checkpoint_loader` to restore it later.
"""
import os
import os.path as osp
from typing import Callable, List, Optional

import numpy as np
import torch
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner.checkpoint import CheckpointLoader

ENV_SWITCH = 'MMSEG_ELLIPTICAL_CHECKPOINT_LOADER'
_mmengine_loader: Optional[Callable] = None
_logged = False


def mmengine_safe_globals() -> List[object]:
    """The globals an mmengine 0.10 checkpoint holds besides tensors."""
    multiarray = getattr(np, '_core', np.core).multiarray
    return [
        HistoryBuffer, getattr, np.ndarray, np.dtype, multiarray._reconstruct,
        multiarray.scalar,
        *{type(np.dtype(t))
          for t in np.sctypeDict.values()}
    ]


def load_from_local(filename: str, map_location: Optional[str] = None):
    """mmengine's local-file loader: weights-only, plus mmengine's globals.

    Args:
        filename (str): Local checkpoint path.
        map_location (str, optional): As for :func:`torch.load`.

    Returns:
        dict: The loaded checkpoint.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    with torch.serialization.safe_globals(mmengine_safe_globals()):
        return torch.load(
            filename, map_location=map_location, weights_only=True)


def checkpoint_loader_enabled() -> bool:
    """Whether ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER`` allows the loader
    (unset, or anything but ``0``, ``false``, ``off``, ``no``)."""
    value = os.environ.get(ENV_SWITCH, '1').strip().lower()
    return value not in ('0', 'false', 'off', 'no')


def register_checkpoint_loader() -> bool:
    """Make :func:`load_from_local` mmengine's loader for local files.

    Idempotent; logs the first time it replaces mmengine's loader in a
    process. Does nothing when ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER=0``.

    Returns:
        bool: Whether the plugin's loader is installed.
    """
    global _mmengine_loader, _logged
    if not checkpoint_loader_enabled():
        return False
    current = CheckpointLoader._schemes.get('')
    if current is load_from_local:
        return True
    _mmengine_loader = current
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_from_local, force=True)
    if not _logged:
        _logged = True
        print_log(
            'mmseg_elliptical: local checkpoints now load through its '
            'weights-only loader that allows mmengine\'s own objects; set '
            f'{ENV_SWITCH}=0 to keep mmengine\'s loader.',
            logger='current')
    return True


def unregister_checkpoint_loader() -> None:
    """Give mmengine its own loader for local files back (idempotent)."""
    if CheckpointLoader._schemes.get('') is load_from_local \
            and _mmengine_loader is not None:
        CheckpointLoader.register_scheme(
            prefixes='', loader=_mmengine_loader, force=True)
