"""How far one cell's aAcc may exceed another's by chance: the tolerance of
the gradient-masking audit's checks, from the test images themselves.

Two cells of one model label the same pixels of the same images, so their
aAcc difference is a paired statistic over the images: ``100 * sum_i (a_i -
b_i) / sum_i n_i`` with ``a_i``, ``b_i`` the correct pixels of image ``i``
in each cell (or the per-image minimum over several cells) and ``n_i`` its
labelled pixels. Its paired bootstrap over the images (the images drawn with
replacement, :data:`RESAMPLES` times, seeded) gives a two-sided
:data:`LEVEL` interval; the tolerance is the point estimate minus the
interval's lower end, so ``difference <= tolerance`` holds exactly when the
interval reaches 0 (the data cannot tell the first cell is higher). It
shrinks as ``1 / sqrt(images)`` and with the cells' agreement image by
image. With ``second`` None it is the interval of one aAcc: the precision
of the number itself (the iterations check: more steps that move the worst
case by less than its own interval leave the reported number as it is).
Without per-image areas (an old store, a synthetic cell) the tolerance is
the fixed :data:`FALLBACK` points, and the check says so.
"""
from typing import NamedTuple, Optional, Tuple

import numpy as np

#: Bootstrap resamples of the images.
RESAMPLES = 2000
#: The interval's coverage.
LEVEL = 0.95
#: Points of aAcc allowed without per-image areas.
FALLBACK = 0.5

Pixels = Tuple[np.ndarray, np.ndarray]


class Tolerance(NamedTuple):
    """A tolerance and how it was found.

    Attributes:
        points (float): aAcc points the first cell may exceed the second.
        images (int | None): Images it was bootstrapped over (None: the
            fixed :data:`FALLBACK`).
        own (bool): The interval of one number, not of a paired
            difference.
    """
    points: float
    images: Optional[int]
    own: bool = False

    def __str__(self) -> str:
        if self.images is None:
            return (f'tolerance {self.points:.2f} (fixed: no per-image '
                    'areas)')
        what = 'bootstrap of the worst case' if self.own else \
            'paired bootstrap'
        return (f'tolerance {self.points:.2f} ({100 * LEVEL:g} % {what} '
                f'over {self.images} images)')


def aacc(correct: np.ndarray, labelled: np.ndarray) -> float:
    """Pooled pixel accuracy (percent) of per-image correct pixels."""
    return float(100 * np.sum(correct) / max(np.sum(labelled), 1))


def tolerance(first: Optional[np.ndarray],
              second: Optional[np.ndarray],
              labelled: Optional[np.ndarray],
              resamples: int = RESAMPLES,
              seed: int = 0) -> Tolerance:
    """The tolerance of ``aAcc(first) - aAcc(second)``.

    Args:
        first (np.ndarray, optional): ``[images]`` correct pixels.
        second (np.ndarray, optional): ``[images]`` correct pixels of the
            other cell, or None: a constant (a one-sample interval of
            ``first``'s aAcc).
        labelled (np.ndarray, optional): ``[images]`` labelled pixels. None
            (or ``first`` None): the fixed :data:`FALLBACK`.
        resamples (int): Bootstrap resamples.
        seed (int): The resampling's seed.

    Returns:
        Tolerance: The points and the images.
    """
    if first is None or labelled is None:
        return Tolerance(FALLBACK, None)
    first = np.asarray(first, np.float64)
    labelled = np.asarray(labelled, np.float64)
    diff = first - (0. if second is None else np.asarray(second, np.float64))
    if diff.shape != labelled.shape or diff.ndim != 1:
        raise ValueError('tolerance needs [images] correct and labelled '
                         f'pixels of one shape, got {diff.shape} and '
                         f'{labelled.shape}.')
    n = diff.size
    point = 100 * diff.sum() / max(labelled.sum(), 1)
    draws = np.random.default_rng(seed).integers(0, n, (resamples, n))
    stats = 100 * diff[draws].sum(1) / np.maximum(labelled[draws].sum(1), 1)
    low = np.quantile(stats, (1 - LEVEL) / 2)
    return Tolerance(float(max(point - low, 0.)), n, second is None)
