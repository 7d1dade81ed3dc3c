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
"""
import os.path as osp
from typing import List, Optional

import numpy as np
import torch
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader


def mmengine_safe_globals() -> List[object]:
    """The globals an mmengine 0.10 checkpoint holds besides tensors."""
    multiarray = getattr(np, '_core', np.core).multiarray
    return [
        HistoryBuffer, getattr, np.ndarray, np.dtype, multiarray._reconstruct,
        multiarray.scalar, *{type(np.dtype(t)) for t in np.sctypeDict.values()}
    ]


def load_from_local(filename: str, map_location: Optional[str] = None):
    """mmengine's local checkpoint loader, weights-only with mmengine's globals.

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


def register_checkpoint_loader() -> None:
    """Make :func:`load_from_local` mmengine's loader for local files."""
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_from_local, force=True)
