"""The per-image areas record of a cell: what the grid stores and the
verdicts read."""
from typing import NamedTuple

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
