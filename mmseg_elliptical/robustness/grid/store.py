"""The robustness grid's results in one JSON file, resumable."""
import json
import os
import os.path as osp
from typing import Dict, List, Optional

import numpy as np

from ...errors import GridError
from ...utils.preflight import model_identity, other_model
from .areas import ImageAreas

CLEAN = 'clean'


def cell_key(corruption: Optional[str], severity: Optional[int]) -> str:
    """JSON key of a cell: ``'clean'`` or ``'<corruption>/<severity>'``."""
    return CLEAN if corruption is None else f'{corruption}/{severity}'


class ResultStore:
    """Grid results in one JSON file (docs/evidence.md), written after every
    finished cell; a cell's per-image areas go to ``areas/`` first.

    Args:
        path (str): JSON file; read when it exists.
        settings (dict): What the numbers depend on; a file written under
            other settings is refused.
        write (bool): Write the files (False: in memory only, as on the
            processes but rank 0).
    """

    def __init__(self, path: str, settings: Dict, write: bool = True) -> None:
        self.path = path
        self.write = write
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
        """Declare a model; a known name must keep its config and checkpoint
        (path, size and modification time)."""
        ident = model_identity(config, checkpoint)
        entry = self.data['models'].setdefault(name, dict(ident, cells={}))
        why = other_model(self.path, name, entry, ident)
        if why:
            raise GridError(why)

    def set_images(self, name: str, images: Optional[List[str]]) -> None:
        """Record the test images (paths, in order) a model's cells were
        evaluated on; they must stay the same in a resumed grid."""
        entry = self.data['models'][name]
        if images is None or entry.get('images') == list(images):
            return
        if entry.get('images') is not None:
            raise GridError(
                f'{self.path} holds results of model {name!r} on other test '
                f'images ({len(entry["images"])} images, now '
                f'{len(images)}): pass another --work-dir, or delete the '
                'file to start over.')
        entry['images'] = list(images)

    def check_same_images(self, name: str, other: str) -> None:
        """Refuse to pair two models evaluated on different test images (in
        a store that recorded them).

        Raises:
            GridError: The test sets differ, in one line.
        """
        a, b = (self.data['models'][n].get('images') for n in (name, other))
        if a is None or b is None or a == b:
            return
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                 min(len(a), len(b)))
        first = f'image {i}: {a[i]} against {b[i]}' if i < min(
            len(a), len(b)) else f'the first {i} agree'
        raise GridError(
            f'The test sets differ: {name} was evaluated on {len(a)} images, '
            f'{other} on {len(b)} ({first}); a paired comparison needs the '
            'same images: give the models configs with the same test data.')

    def get(self, name: str, key: str) -> Optional[Dict]:
        """Metrics of a finished cell, or None."""
        return self.data['models'][name]['cells'].get(key)

    def put(self,
            name: str,
            key: str,
            metrics: Dict,
            areas: Optional[tuple] = None) -> None:
        """Record a finished cell and rewrite the file atomically.

        Args:
            name (str): Model name.
            key (str): Cell key.
            metrics (dict): The cell's metrics.
            areas (tuple, optional): ``(intersect, union)`` per image and
                class, and optionally the labelled pixels per image, saved
                beside the JSON file first.
        """
        if areas is not None and self.write:
            path = self.areas_path(name, key)
            os.makedirs(osp.dirname(path), exist_ok=True)
            with open(f'{path}.tmp', 'wb') as f:
                extra = dict(labelled=areas[2]) if len(areas) > 2 else {}
                np.savez_compressed(
                    f, intersect=areas[0], union=areas[1], **extra)
            os.replace(f'{path}.tmp', path)
        self.data['models'][name]['cells'][key] = metrics
        self.save()

    def save(self) -> None:
        """Rewrite the JSON file atomically (when writing)."""
        if not self.write:
            return
        os.makedirs(osp.dirname(osp.abspath(self.path)), exist_ok=True)
        tmp = f'{self.path}.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)

    def areas_path(self, name: str, key: str) -> str:
        """File of a cell's per-image areas."""
        return osp.join(
            osp.dirname(osp.abspath(self.path)), 'areas', name, f'{key}.npz')

    def areas(self, name: str, key: str) -> Optional[ImageAreas]:
        """The per-image areas of a finished cell, or None when they were
        not kept (another metric, or results of an older version)."""
        path = self.areas_path(name, key)
        if self.get(name, key) is None or not osp.isfile(path):
            return None
        with np.load(path) as f:
            return ImageAreas(f['intersect'], f['union'])

    def labelled(self, name: str, key: str) -> Optional[np.ndarray]:
        """The labelled pixels of each image of a finished cell
        (``[images]``), or None (not kept, or a store of an older version).
        """
        path = self.areas_path(name, key)
        if self.get(name, key) is None or not osp.isfile(path):
            return None
        with np.load(path) as f:
            return f['labelled'] if 'labelled' in f.files else None
