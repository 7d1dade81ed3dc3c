"""The robustness grid's results in one JSON file, resumable."""
import json
import os
import os.path as osp
from typing import Dict, Optional

CLEAN = 'clean'


class GridError(ValueError):
    """A grid that cannot run as asked (names, settings, stored results)."""


def cell_key(corruption: Optional[str], severity: Optional[int]) -> str:
    """JSON key of a cell: ``'clean'`` or ``'<corruption>/<severity>'``."""
    return CLEAN if corruption is None else f'{corruption}/{severity}'


class ResultStore:
    """Grid results in one JSON file, written after every finished cell.

    Layout::

        {"settings": {...},
         "models": {"<name>": {"config": ..., "checkpoint": ...,
                               "cells": {"clean": {"mIoU": ...}, ...}}}}

    Args:
        path (str): JSON file; read when it exists.
        settings (dict): What the numbers depend on (metric, seed, split,
            number of images). A file written under other settings is
            refused, so stale numbers never mix with new ones.
    """

    def __init__(self, path: str, settings: Dict) -> None:
        self.path = path
        settings = json.loads(json.dumps(settings))  # as the file holds it
        self.data: Dict = dict(settings=settings, models={})
        if osp.exists(path):
            with open(path) as f:
                found = json.load(f)
            if found.get('settings') != settings:
                raise GridError(
                    f'{path} holds results computed with settings '
                    f'{found.get("settings")}, not {settings}: pass another '
                    '--work-dir, or delete the file to start over.')
            self.data = found

    def add_model(self, name: str, config: str, checkpoint: str) -> None:
        """Declare a model; a known name must keep its config and checkpoint.

        The checkpoint is identified by path, size and modification time, so
        results of an overwritten checkpoint are never reused.

        Args:
            name (str): Model name (table column).
            config (str): Config path.
            checkpoint (str): Checkpoint path.
        """
        stat = os.stat(checkpoint)
        ident = dict(
            config=config,
            checkpoint=checkpoint,
            checkpoint_size=stat.st_size,
            checkpoint_mtime=int(stat.st_mtime))
        entry = self.data['models'].setdefault(name, dict(ident, cells={}))
        found = {k: entry.get(k) for k in ident}
        if found != ident:
            raise GridError(
                f'{self.path} holds results of model {name!r} from '
                f'{found}, not {ident}: pass --names to tell them apart, '
                'another --work-dir, or delete the file to start over.')

    def get(self, name: str, key: str) -> Optional[Dict]:
        """Metrics of a finished cell, or None."""
        return self.data['models'][name]['cells'].get(key)

    def put(self, name: str, key: str, metrics: Dict) -> None:
        """Record a finished cell and rewrite the file atomically."""
        self.data['models'][name]['cells'][key] = metrics
        os.makedirs(osp.dirname(osp.abspath(self.path)), exist_ok=True)
        tmp = f'{self.path}.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)
