"""A paired bootstrap over images of the mIoU difference of two models.

Both models are evaluated on the same images. Each resample draws ``n`` of
the ``n`` images with replacement (the same draw for both models and every
cell), re-sums their per-image intersection and union areas per class and
takes mIoU as mmseg's ``IoUMetric`` does (the mean over the classes whose
union is not empty). The statistic is the mean of mIoU over the given cells:
the clean cell alone gives the clean mIoU, the corrupted cells mPC. The
interval is the percentile interval of the resampled differences (Efron &
Tibshirani 1993, ch. 13).
"""
from typing import Dict, NamedTuple, Sequence

import numpy as np


class ImageAreas(NamedTuple):
    """Per-image areas of one cell, in pixels (mmseg's
    ``intersect_and_union``).

    Attributes:
        intersect (np.ndarray): ``[images, classes]`` intersection areas.
        union (np.ndarray): ``[images, classes]`` union areas.
    """
    intersect: np.ndarray
    union: np.ndarray


def miou(intersect: np.ndarray, union: np.ndarray) -> np.ndarray:
    """mIoU (percent) of summed areas ``[..., classes]``: the mean IoU over
    the classes with a non-empty union (NaN when there is none)."""
    present = union > 0
    iou = np.divide(intersect, union, out=np.zeros(union.shape), where=present)
    count = present.sum(-1)
    return np.divide(
        100 * iou.sum(-1),
        count,
        out=np.full(count.shape, np.nan),
        where=count > 0)


def resample_counts(images: int, resamples: int, seed: int) -> np.ndarray:
    """How often each image is drawn in each resample: ``[resamples,
    images]`` (every row sums to ``images``)."""
    draws = np.random.default_rng(seed).integers(
        0, images, size=(resamples, images))
    return np.stack([np.bincount(row, minlength=images) for row in draws])


def _mean_miou(cells: Sequence[ImageAreas], counts: np.ndarray) -> np.ndarray:
    return np.mean([
        miou(counts @ c.intersect.astype(np.float64),
             counts @ c.union.astype(np.float64)) for c in cells
    ],
                   axis=0)


def paired_bootstrap(a: Sequence[ImageAreas],
                     b: Sequence[ImageAreas],
                     resamples: int = 1000,
                     seed: int = 0,
                     level: float = 0.95) -> Dict:
    """The difference ``a - b`` of the mean mIoU over cells, with its
    bootstrap interval.

    Args:
        a (Sequence[ImageAreas]): Model a's areas, one entry per cell.
        b (Sequence[ImageAreas]): Model b's, the same cells and images.
        resamples (int): Number of resamples. Defaults to 1000.
        seed (int): Seed of the draws. Defaults to 0.
        level (float): Coverage of the interval. Defaults to 0.95.

    Returns:
        dict: ``difference`` (on all images), ``low`` and ``high`` (the
        interval), ``zero_inside``, ``level``, ``resamples``, ``seed``,
        ``images`` and ``cells``.
    """
    if not a or len(a) != len(b):
        raise ValueError(f'paired_bootstrap needs the same cells of both '
                         f'models, got {len(a)} and {len(b)}.')
    a, b = ([ImageAreas(*c) for c in x] for x in (a, b))
    shapes = {x.shape for cell in (*a, *b) for x in cell}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError('paired_bootstrap needs [images, classes] areas of '
                         f'one shape for every cell, got {sorted(shapes)}.')
    images = next(iter(shapes))[0]
    if images < 2:
        raise ValueError(f'A bootstrap over images needs 2 or more, got '
                         f'{images}.')
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f'resamples={resamples} must be >= 1 and '
                         f'level={level} in (0, 1).')
    counts = resample_counts(images, resamples, seed).astype(np.float64)
    diffs = _mean_miou(a, counts) - _mean_miou(b, counts)
    ones = np.ones((1, images))
    difference = float((_mean_miou(a, ones) - _mean_miou(b, ones))[0])
    low, high = np.nanpercentile(diffs, [50 * (1 - level), 50 * (1 + level)])
    return dict(
        difference=difference,
        low=float(low),
        high=float(high),
        zero_inside=bool(low <= 0 <= high),
        level=level,
        resamples=resamples,
        seed=seed,
        images=images,
        cells=len(a))
