"""SEA's worst case over attack cells (Croce, Singh and Hein, ECCV 2024).

Any attack that hurts an image counts against the model, so the worst case
picks one cell per image:

* aAcc: per image the cell of lowest pixel accuracy (the fewest correct
  pixels: every cell labels the same pixels of an image), pooled over the
  pixels as mmseg's ``aAcc``;
* mIoU: SEA's greedy search. Every image starts from that lowest-accuracy
  cell (SEA starts from APGD-MCE-Bal's; the lowest accuracy over every cell,
  MCE-Bal's included, is at least as strong a start), then, image by image
  in a seeded shuffled order, switches to the cell that lowers the pooled
  mIoU most, until a full pass changes nothing: a local optimum, no single
  image can switch and lower the mIoU.
"""
from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np

from ..grid.areas import ImageAreas, miou

#: A switch must lower the mIoU (percent) by more than this (rounding).
TOLERANCE = 1e-9


class WorstCase(NamedTuple):
    """The worst case of one model at one eps.

    Attributes:
        miou (float): Pooled mIoU (percent) of :attr:`choice`.
        aacc (float | None): Pooled pixel accuracy (percent) of the per-image
            minimum-accuracy choice (None: labelled pixels not stored).
        choice (np.ndarray): ``[images]`` index of the cell each image takes
            in the mIoU search.
        accuracy_choice (np.ndarray): ``[images]`` the aAcc's choice.
        areas (ImageAreas): The areas of :attr:`choice`.
    """
    miou: float
    aacc: Optional[float]
    choice: np.ndarray
    accuracy_choice: np.ndarray
    areas: ImageAreas


def pooled_miou(intersect: np.ndarray, union: np.ndarray) -> np.ndarray:
    """mIoU of summed ``[..., classes]`` integer areas (percent)."""
    return miou(intersect.astype(np.float64), union.astype(np.float64))


def greedy_worst_case(cells: Sequence[ImageAreas],
                      labelled: Optional[np.ndarray] = None,
                      seed: int = 0,
                      max_passes: int = 100) -> WorstCase:
    """SEA's worst case over ``cells`` (the same images, in one order).

    Args:
        cells (Sequence[ImageAreas]): Each cell's ``[images, classes]``
            areas.
        labelled (np.ndarray, optional): ``[images]`` labelled pixels of
            each image (None: no aAcc).
        seed (int): Seed of the images' order in each pass. Defaults to 0.
        max_passes (int): A bound on the passes (each pass lowers the mIoU,
            so it ends; the bound only guards against rounding).

    Returns:
        WorstCase: The result.
    """
    if not cells:
        raise ValueError('greedy_worst_case needs at least one cell.')
    inter = np.stack([np.asarray(c.intersect, np.int64) for c in cells])
    union = np.stack([np.asarray(c.union, np.int64) for c in cells])
    if inter.ndim != 3 or inter.shape != union.shape:
        raise ValueError('greedy_worst_case needs [images, classes] areas of '
                         f'one shape for every cell, got {inter.shape[1:]} '
                         f'and {union.shape[1:]}.')
    images = np.arange(inter.shape[1])
    correct = inter.sum(-1)  # [cells, images]
    start = correct.argmin(0)  # the first cell on a tie
    aacc = None
    if labelled is not None and np.sum(labelled) > 0:
        aacc = float(100 * correct[start, images].sum() / np.sum(labelled))
    choice = start.copy()
    total_i = inter[choice, images].sum(0)
    total_u = union[choice, images].sum(0)
    current = float(pooled_miou(total_i, total_u))
    rng = np.random.default_rng(seed)
    for _ in range(max_passes):
        changed = False
        for i in rng.permutation(images.size):
            c = choice[i]
            # [cells, classes] totals with image i taking each cell.
            cand_i = total_i - inter[c, i] + inter[:, i]
            cand_u = total_u - union[c, i] + union[:, i]
            scores = pooled_miou(cand_i, cand_u)
            scores = np.where(np.isnan(scores), np.inf, scores)
            best = int(scores.argmin())
            if scores[best] < current - TOLERANCE:
                choice[i] = best
                total_i, total_u = cand_i[best], cand_u[best]
                current = float(scores[best])
                changed = True
        if not changed:
            break
    areas = ImageAreas(inter[choice, images], union[choice, images])
    return WorstCase(current, aacc, choice, start, areas)


def worst_record(result: WorstCase, keys: Sequence[str]) -> Dict:
    """The JSON record of a worst case over the cells ``keys``:
    ``mIoU``, ``aAcc``, ``choice`` (``{image index: cell key}``, 0-based
    indices as strings) and ``cells`` (the keys that entered)."""
    return dict(
        mIoU=result.miou,
        aAcc=result.aacc,
        choice={
            str(i): keys[c]
            for i, c in enumerate(result.choice)
        },
        cells=list(keys))
