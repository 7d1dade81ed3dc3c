"""Independent re-computations for the arms (``robustness/arms``
and the hierarchical bootstrap), one resample and one run at a time, with
mmseg's own ``IoUMetric.total_area_to_metrics`` for mIoU, and synthetic
stores of several runs per arm."""
import os.path as osp
from typing import Dict, List, Sequence

import numpy as np
import torch

from mmseg_elliptical.robustness.grid.areas import ImageAreas, miou
from mmseg_elliptical.robustness.grid.store import ResultStore


def miou_by_hand(cells, idx) -> float:
    """Mean over cells of mmseg's mIoU of the images ``idx`` (summed)."""
    from mmseg.evaluation import IoUMetric
    values = []
    for inter, union in cells:
        i, u = (
            torch.tensor(x[idx].sum(0), dtype=torch.float64)
            for x in (inter, union))
        iou = IoUMetric.total_area_to_metrics(i, u, u, u, ['mIoU'])['IoU']
        values.append(np.nanmean(iou) * 100)
    return float(np.mean(values))


def hierarchical_by_hand(a: Sequence, b: Sequence, resamples: int,
                         seed: int) -> Dict:
    """The two-level paired bootstrap as the issue words it: the images
    drawn once per resample (the generator's first call, for every run),
    then per arm as many runs as it has with replacement (a's, then b's);
    each drawn run's mIoU from the drawn images, the arm's value the mean
    over its drawn runs; the 2.5 and 97.5 percentiles of the differences.
    """
    n = a[0][0][0].shape[0]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    picks = [rng.integers(0, len(x), size=(resamples, len(x))) for x in (a, b)]
    diffs = []
    for r in range(resamples):
        arm_values = [
            np.mean([miou_by_hand(arm[j], draws[r]) for j in pick[r]])
            for arm, pick in zip((a, b), picks)
        ]
        diffs.append(arm_values[0] - arm_values[1])
    full = np.arange(n)
    values = [[miou_by_hand(run, full) for run in arm] for arm in (a, b)]
    low, high = np.percentile(diffs, [2.5, 97.5])
    return dict(
        difference=np.mean(values[0]) - np.mean(values[1]),
        low=low,
        high=high,
        values=values)


def areas(rng, images: int, classes: int, quality: float) -> ImageAreas:
    """Per-image areas of a model whose IoU per class is about
    ``quality`` (0-1), with noise."""
    union = rng.integers(20, 60, size=(images, classes))
    share = np.clip(quality + 0.1 * rng.standard_normal((images, classes)), 0,
                    1)
    return ImageAreas((union * share).astype(np.int64), union)


def synthetic_store(tmp_path,
                    runs: Dict[str, List[Dict[str, ImageAreas]]],
                    settings: Dict = None) -> ResultStore:
    """A store of ``{arm: [{cell_key: areas} per run]}``: runs named as the
    tools name them (``ARM#I`` in arms of two or more), each cell's mIoU
    from its areas, a dummy checkpoint per run."""
    store = ResultStore(str(tmp_path / 'grid.json'), settings or {})
    for arm, cells_of_runs in runs.items():
        for i, cells in enumerate(cells_of_runs):
            name = arm if len(cells_of_runs) == 1 else f'{arm}#{i}'
            ckpt = osp.join(str(tmp_path), f'{name}.pth')
            open(ckpt, 'wb').close()
            store.add_model(name, 'config.py', ckpt)
            for key, x in cells.items():
                value = float(
                    miou(
                        x.intersect.sum(0).astype(float),
                        x.union.sum(0).astype(float)))
                store.put(name, key, dict(mIoU=value), (x.intersect, x.union))
    return store


#: The cells of a synthetic run.
CELLS = ['clean', 'fog/1', 'fog/5']


def runs_of(rng, qualities, cells=CELLS, images=40, classes=4):
    """One ``{cell: areas}`` per run of the given qualities."""
    return [{
        k: areas(rng, images, classes, q)
        for k in cells
    } for q in qualities]


def as_lists(runs, cells=CELLS):
    return [[r[k] for k in cells] for r in runs]
