"""Local checkpoints through mmengine: torch's weights-only loader with
mmengine's own objects allowed, and a clear error for an unreadable file.

Installed at import, the plugin's one side effect besides registering
modules; ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER=0`` keeps mmengine's loader
(docs/reliability.md says why a loader and not a process-wide allowlist).
"""
import logging
import os
import os.path as osp
from typing import Callable, List, Optional

import numpy as np
import torch
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner.checkpoint import CheckpointLoader
from mmengine.runner.checkpoint import \
    load_from_local as mmengine_load_from_local

from ..utils.files import checkpoint_error, unreadable_reason

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


def _log_once() -> None:
    """Say once per process, on rank 0, at the first checkpoint it loads,
    which loader reads local checkpoints and how to keep mmengine's: at
    DEBUG level (a log set to DEBUG shows it; docs/reliability.md says it
    for everyone), so no tool prints a line at every start that the user
    did not ask for."""
    global _logged
    if _logged or os.environ.get('RANK', '0') != '0':
        return
    _logged = True
    print_log(
        'mmseg_elliptical: local checkpoints load through mmengine\'s '
        'loader with mmengine\'s own objects allowed (still weights-only) '
        'and a clear error for an unreadable file; set '
        f'{ENV_SWITCH}=0 to keep mmengine\'s loader.',
        logger='current',
        level=logging.DEBUG)


def load_from_local(filename: str, map_location: Optional[str] = None):
    """mmengine's local-file loader with mmengine's globals allowed.

    Raises:
        CheckpointError: For a file that is no complete checkpoint.
    """
    _log_once()
    try:
        with torch.serialization.safe_globals(mmengine_safe_globals()):
            return mmengine_load_from_local(filename, map_location)
    except Exception as error:
        path = osp.expanduser(filename)
        if not osp.isfile(path):
            raise
        reason = unreadable_reason(path)
        if reason is None and (isinstance(error, EOFError)
                               or 'truncated' in str(error)):
            reason = 'it is cut short (the data ends early)'
        if reason is None:
            raise
        raise checkpoint_error(path, reason) from error


def checkpoint_loader_enabled() -> bool:
    """Whether ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER`` allows the loader
    (unset, or anything but ``0``, ``false``, ``off``, ``no``)."""
    value = os.environ.get(ENV_SWITCH, '1').strip().lower()
    return value not in ('0', 'false', 'off', 'no')


def register_checkpoint_loader() -> bool:
    """Make :func:`load_from_local` mmengine's loader for local files
    (idempotent; logged at the first load) and return whether it is
    installed."""
    global _mmengine_loader
    if not checkpoint_loader_enabled():
        return False
    current = CheckpointLoader._schemes.get('')
    if current is load_from_local:
        return True
    _mmengine_loader = current
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_from_local, force=True)
    return True


def unregister_checkpoint_loader() -> None:
    """Give mmengine its own loader for local files back (idempotent)."""
    if CheckpointLoader._schemes.get('') is load_from_local \
            and _mmengine_loader is not None:
        CheckpointLoader.register_scheme(
            prefixes='', loader=_mmengine_loader, force=True)
