"""A paired bootstrap over images of the mIoU difference of two models.

Both models are evaluated on the same images. Each resample draws ``n`` of
the ``n`` images with replacement (the same draw for both models and every
cell), re-sums their per-image intersection and union areas per class and
takes mIoU as mmseg's ``IoUMetric`` does (the mean over the classes whose
union is not empty). The statistic is the mean of mIoU over the given cells:
the clean cell alone gives the clean mIoU, the corrupted cells mPC. The
interval is ``scipy.stats.bootstrap``'s percentile interval; below
:data:`MIN_IMAGES` images it comes without a verdict.
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


#: Fewer images than this: the interval is reported, the verdict is not.
MIN_IMAGES = 30


def draw_counts(draws: np.ndarray) -> np.ndarray:
    """How often each of ``n`` images is drawn: image indices ``[..., n]``
    to counts ``[..., n]`` (each row sums to ``n``)."""
    n = draws.shape[-1]
    rows = draws.reshape(-1, n)
    offsets = rows + n * np.arange(len(rows))[:, None]
    counts = np.bincount(offsets.ravel(), minlength=rows.size)
    return counts.reshape(draws.shape).astype(np.float64)


def _mean_miou(cells: Sequence[ImageAreas], counts: np.ndarray) -> np.ndarray:
    return np.mean([
        miou(counts @ c.intersect.astype(np.float64),
             counts @ c.union.astype(np.float64)) for c in cells
    ],
                   axis=0)


def verdict(zero_inside: bool, images: int) -> str:
    """What the interval says, or why it says nothing."""
    if images < MIN_IMAGES:
        return (f'not reliable below {MIN_IMAGES} images ({images}): no '
                'verdict')
    if zero_inside:
        return '0 inside: no evidence of a difference'
    return '0 outside: a real difference'


def paired_bootstrap(a: Sequence[ImageAreas],
                     b: Sequence[ImageAreas],
                     resamples: int = 1000,
                     seed: int = 0,
                     level: float = 0.95) -> Dict:
    """The difference ``a - b`` of the mean mIoU over cells, with its
    percentile interval from ``scipy.stats.bootstrap`` (paired: both models
    and every cell share each draw of images).

    Args:
        a (Sequence[ImageAreas]): Model a's areas, one entry per cell.
        b (Sequence[ImageAreas]): Model b's, the same cells and images.
        resamples (int): Number of resamples. Defaults to 1000.
        seed (int): Seed of the draws. Defaults to 0.
        level (float): Coverage of the interval. Defaults to 0.95.

    Returns:
        dict: ``difference`` (on all images), ``low`` and ``high`` (the
        interval), ``zero_inside``, ``reliable`` (at least
        :data:`MIN_IMAGES` images), ``verdict`` (a phrase), ``level``,
        ``resamples``, ``seed``, ``images`` and ``cells``.
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

    def difference(draws: np.ndarray, axis: int = -1) -> np.ndarray:
        counts = draw_counts(draws)
        return _mean_miou(a, counts) - _mean_miou(b, counts)

    # scipy.stats costs ~0.2 s to import: only when a test runs, not at
    # every `import mmseg_elliptical` (the evidence hook imports analysis).
    from scipy.stats import bootstrap

    # The image indices are resampled, not the areas: scipy would gather
    # [cells, classes, resamples, images] areas (230 GB at ADE20K-C's size).
    result = bootstrap((np.arange(images), ),
                       difference,
                       n_resamples=resamples,
                       vectorized=True,
                       paired=True,
                       confidence_level=level,
                       method='percentile',
                       rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    zero_inside = bool(low <= 0 <= high)
    return dict(
        difference=float(difference(np.arange(images))),
        low=float(low),
        high=float(high),
        zero_inside=zero_inside,
        reliable=images >= MIN_IMAGES,
        verdict=verdict(zero_inside, images),
        level=level,
        resamples=resamples,
        seed=seed,
        images=images,
        cells=len(a))
