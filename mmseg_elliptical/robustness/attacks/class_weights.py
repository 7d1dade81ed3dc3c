"""The class weights of ``apgd-mce-bal``: each class's inverse pixel count
in the config's training set (SEA's class-balanced MCE), counted once with
mmseg's dataset and ``LoadAnnotations`` and cached in a JSON file beside
the grid's store, keyed by the training dataset's config."""
import copy
import hashlib
import json
import os
import os.path as osp
from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

import numpy as np
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmseg.registry import DATASETS

from ...errors import AnalysisError
from ...utils.config import ModelSpec, load_config
from .losses import BALANCED, inverse_frequency
from .pgd import Attack

#: The cache's file name, beside ``adversarial.json``.
CACHE = 'class_weights.json'


def leaf_datasets(cfg: Dict) -> List[Dict]:
    """The datasets under mmengine's wrappers (``dataset`` or ``datasets``
    keys: Repeat-, ClassBalanced- and ConcatDataset), each counted once."""
    if 'datasets' in cfg:
        return [d for c in cfg['datasets'] for d in leaf_datasets(c)]
    if 'dataset' in cfg:
        return leaf_datasets(cfg['dataset'])
    return [cfg]


def count_pixels(dataset_cfg: Dict) -> List[int]:
    """Pixels of each class over one dataset's annotations, loaded by its
    own ``LoadAnnotations`` (mmseg's, when the pipeline has none)."""
    init_default_scope('mmseg')
    cfg = copy.deepcopy(dataset_cfg)
    loads = [
        t for t in cfg.get('pipeline') or []
        if str(t.get('type')).split('.')[-1] == 'LoadAnnotations'
    ]
    cfg['pipeline'] = loads[:1] or [dict(type='LoadAnnotations')]
    dataset = DATASETS.build(cfg)
    classes = len(dataset.metainfo['classes'])
    counts = np.zeros(classes, dtype=np.int64)
    for i in range(len(dataset)):
        seg = np.asarray(dataset[i]['gt_seg_map']).ravel()
        counts += np.bincount(seg[seg < classes], minlength=classes)
    return counts.tolist()


def train_class_counts(cfg: Config) -> List[int]:
    """Pixels of each class in ``cfg``'s training set.

    Raises:
        AnalysisError: No training set, one that cannot be read, or no
            labelled pixel.
    """
    loader = cfg.get('train_dataloader')
    if not loader or not loader.get('dataset'):
        raise AnalysisError(
            'apgd-mce-bal weights classes by their pixels in the training '
            'set, and the config has no train_dataloader.dataset: add it, or '
            'drop apgd-mce-bal.')
    try:
        per_set = [count_pixels(d) for d in leaf_datasets(loader.dataset)]
    except Exception as e:  # any reason the annotations cannot be read
        raise AnalysisError(
            'apgd-mce-bal cannot count the classes of the training set '
            f'({type(e).__name__}: {e}): fix train_dataloader.dataset, or '
            'drop apgd-mce-bal.') from e
    counts = [sum(c) for c in zip(*per_set)]
    if not counts or not any(counts):
        raise AnalysisError(
            'apgd-mce-bal found no labelled pixel in the training set: fix '
            'train_dataloader.dataset, or drop apgd-mce-bal.')
    return counts


def train_class_weights(cfg: Config, cache: str) -> Tuple[float, ...]:
    """The class weights of ``cfg``'s training set (:func:`inverse_frequency`
    of :func:`train_class_counts`), read from or added to ``cache``."""
    dataset = (cfg.get('train_dataloader') or {}).get('dataset')
    text = json.dumps(dataset, sort_keys=True, default=str)
    key = hashlib.sha1(text.encode()).hexdigest()[:16]
    found = {}
    if osp.isfile(cache):
        with open(cache) as f:
            found = json.load(f)
    if key not in found:
        counts = train_class_counts(cfg)
        found[key] = dict(
            dataset=text, counts=counts, weights=inverse_frequency(counts))
        os.makedirs(osp.dirname(osp.abspath(cache)), exist_ok=True)
        tmp = f'{cache}.{os.getpid()}.tmp'  # each process its own
        with open(tmp, 'w') as f:
            json.dump(found, f, indent=1)
        os.replace(tmp, cache)
    return tuple(found[key]['weights'])


def weighted_cells(cells: Dict[str, Sequence],
                   weights: Dict[str, Tuple[float, ...]]) -> Dict[str, List]:
    """Each model's cells with its class weights in its balanced attacks
    (``{name: cells}``, ``{name: weights}``)."""
    return {
        name: [
            replace(c, class_weights=weights.get(name))
            if isinstance(c, Attack) and c.name in BALANCED else c for c in cs
        ]
        for name, cs in cells.items()
    }


def class_weights_of(attacks: Sequence[str], specs: Sequence[ModelSpec],
                     cfg_options: Dict, work_dir: str) -> Dict[str, Tuple]:
    """``{model: class weights}`` when ``attacks`` hold a balanced one
    (cached in ``<work_dir>/class_weights.json``), else ``{}``.

    Raises:
        AnalysisError: A training set whose classes cannot be counted.
    """
    if not any(a in BALANCED for a in attacks):
        return {}
    cache = osp.join(work_dir, CACHE)
    return {
        spec.name:
        train_class_weights(load_config(spec.config, cfg_options), cache)
        for spec in specs
    }
