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
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from scipy.stats import bootstrap, quantile, ttest_ind  # not the plugin's

from ..grid.areas import ImageAreas, miou

#: Fewer images than this: the interval is reported, the verdict is not.
MIN_IMAGES = 30
#: Fewer runs in an arm than this: no verdict across training seeds.
MIN_RUNS = 3


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


def verdict(zero_inside: bool,
            images: int,
            runs: Union[int, Sequence[int]] = 1) -> str:
    """What the interval says, and what it varied: the test images only
    (one run against one run), or the runs too
    (:func:`hierarchical_bootstrap`; ``runs``: each arm's run count, or
    one count for both; at least :data:`MIN_RUNS` in each for a verdict
    across seeds). Arms of unequal size are named ``A / B runs``."""
    counts = [runs, runs] if isinstance(runs, int) else list(runs)
    if images < MIN_IMAGES:
        return (f'not reliable below {MIN_IMAGES} images ({images}): no '
                'verdict')
    side = '0 inside' if zero_inside else '0 outside'
    fewest = min(counts)
    named = f'{counts[0]} / {counts[1]} runs' if counts[0] != counts[1] \
        else f'{fewest} runs'
    if max(counts) <= 1:
        differ = 'do not measurably differ' if zero_inside else 'differ'
        return (f'{side}: one run against one run: these checkpoints '
                f'{differ} on these images; seed-to-seed variation is not in '
                'this interval')
    if fewest <= 1:
        return (f'{side}: {named}: an arm of one run has no seed-to-seed '
                'variation to measure: no verdict across seeds')
    if fewest < MIN_RUNS:
        return f'{side}: {named}: too few for a verdict across seeds'
    if zero_inside:
        return ('0 inside (the bootstrap\'s or Welch\'s interval): no '
                f'evidence that the arms differ ({named})')
    return ('0 outside (both intervals): the arms differ beyond the '
            f'variation of these {named} and the test images')


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
        interval), ``zero_inside``, ``reliable`` (False: one run per
        model says nothing of the seed), ``verdict`` (a phrase), ``level``,
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
        reliable=False,  # one run per model: no verdict across seeds
        verdict=verdict(zero_inside, images),
        level=level,
        resamples=resamples,
        seed=seed,
        images=images,
        cells=len(a))


def _runs_of(arm: Sequence[Sequence[ImageAreas]], cells: int,
             what: str) -> List[List[ImageAreas]]:
    runs = [[ImageAreas(*c) for c in run] for run in arm]
    if not runs or any(len(r) != cells for r in runs):
        raise ValueError(f'hierarchical_bootstrap needs one or more runs of '
                         f'arm {what}, each with the {cells} cells, got '
                         f'{[len(r) for r in runs]}.')
    return runs


def welch_interval(a: Sequence[float], b: Sequence[float],
                   level: float) -> Optional[Dict]:
    """Welch's t interval of ``mean(a) - mean(b)`` (scipy's
    ``ttest_ind(equal_var=False)``), or None with fewer than 2 values in an
    arm or no spread in either."""
    if len(a) < 2 or len(b) < 2:
        return None
    low, high = ttest_ind(a, b, equal_var=False).confidence_interval(level)
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    return dict(low=float(low), high=float(high))


def hierarchical_bootstrap(a: Sequence[Sequence[ImageAreas]],
                           b: Sequence[Sequence[ImageAreas]],
                           resamples: int = 1000,
                           seed: int = 0,
                           level: float = 0.95) -> Dict:
    """The difference of two arms (several training runs each) in the mean
    mIoU over cells: a two-level paired bootstrap (Saravanan et al. 2020)
    and Welch's t interval over the runs (docs/evidence.md).

    Each resample draws the images once, with replacement, for every run
    and cell (paired, exactly as :func:`paired_bootstrap`: the generator's
    first call), then for each arm as many runs as it has, with
    replacement; a drawn run's statistic comes from the summed areas of the
    drawn images, an arm's value is the mean over its drawn runs. With one
    run per arm the draws, the interval and the difference are
    :func:`paired_bootstrap`'s.

    Args:
        a (Sequence[Sequence[ImageAreas]]): Per run of arm a, its cells.
        b (Sequence[Sequence[ImageAreas]]): Per run of the baseline arm,
            the same cells of the same images.
        resamples (int): Number of resamples. Defaults to 1000.
        seed (int): Seed of the draws. Defaults to 0.
        level (float): Coverage of both intervals. Defaults to 0.95.

    Returns:
        dict: :func:`paired_bootstrap`'s keys (``difference`` of the arm
        means on all images, the percentile interval ``low`` / ``high``)
        plus ``runs`` (``[runs of a, runs of b]``), ``values`` (each run's
        statistic on all images) and ``welch`` (``{low, high}`` or None);
        ``zero_inside`` is true when 0 is inside either interval.
    """
    cells = len(a[0]) if a else 0
    a, b = _runs_of(a, cells, 'a'), _runs_of(b, cells, 'b')
    shapes = {x.shape for run in (*a, *b) for cell in run for x in cell}
    if not cells or len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError('hierarchical_bootstrap needs [images, classes] '
                         'areas of one shape for every run and cell, got '
                         f'{sorted(shapes)}.')
    images = next(iter(shapes))[0]
    if images < 2 or resamples < 1 or not 0 < level < 1:
        raise ValueError(f'A bootstrap over images needs 2 or more (got '
                         f'{images}), resamples={resamples} >= 1 and '
                         f'level={level} in (0, 1).')
    rng = np.random.default_rng(seed)
    # scipy.stats.bootstrap's draw of image indices, then the runs' draws.
    counts = draw_counts(rng.integers(0, images, (resamples, images)))
    picks = [
        rng.integers(0, len(arm), (resamples, len(arm))) for arm in (a, b)
    ]
    rows = np.arange(resamples)[:, None]
    boot = np.subtract(*[
        np.stack([_mean_miou(run, counts) for run in arm])[pick, rows].mean(1)
        for arm, pick in zip((a, b), picks)
    ])
    alpha = (1 - level) / 2
    low, high = (
        float(x) for x in quantile(boot, np.array([alpha, 1 - alpha])))
    values = [[float(_mean_miou(run, np.ones(images))) for run in arm]
              for arm in (a, b)]
    welch = welch_interval(*values, level)
    zero_inside = bool(low <= 0 <= high) or (
        welch is not None and welch['low'] <= 0 <= welch['high'])
    runs = min(len(a), len(b))
    return dict(
        difference=float(np.mean(values[0]) - np.mean(values[1])),
        low=low,
        high=high,
        zero_inside=zero_inside,
        reliable=bool(images >= MIN_IMAGES and runs >= MIN_RUNS
                      and welch is not None),
        verdict=verdict(zero_inside, images, (len(a), len(b))),
        level=level,
        resamples=resamples,
        seed=seed,
        images=images,
        cells=cells,
        runs=[len(a), len(b)],
        values=values,
        welch=welch)
