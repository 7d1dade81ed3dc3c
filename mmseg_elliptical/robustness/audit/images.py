"""The gradient-masking audit's checks image by image: the share of images a
weaker cell beats the white-box worst case on, against :data:`ALLOWED`
(one-sided exact binomial test; the rule and its power: docs/evidence.md)."""
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from scipy.stats import binom, binomtest

#: Images a per-image check needs to decide.
MIN_IMAGES = 30
#: Points of an image's pixel accuracy by which the weaker cell must beat
#: the white-box worst case for the image to count as beaten.
IMAGE_MARGIN = 0.25
#: The share of beaten images an honest model may show.
ALLOWED = 0.10
#: Each one-sided test's level.
ALPHA = 0.05

RESULTS = {'pass': True, 'fail': False, 'inconclusive': None}


def image_accuracy(correct: np.ndarray, labelled: np.ndarray) -> np.ndarray:
    """Each image's pixel accuracy in percent (NaN without labels)."""
    labelled = np.asarray(labelled, np.float64)
    return np.divide(
        100 * np.asarray(correct, np.float64),
        labelled,
        out=np.full(labelled.shape, np.nan),
        where=labelled > 0)


def share_test(beaten: int,
               images: int,
               allowed: float = ALLOWED,
               alpha: float = ALPHA,
               min_images: int = MIN_IMAGES) -> Dict:
    """The binomial test of ``beaten`` of ``images`` against ``allowed``:
    ``fail`` when the share is above it (level ``alpha``), else ``pass``;
    ``inconclusive`` under ``min_images``.

    Returns:
        dict: ``result``, ``p_above`` and ``p_below`` (one-sided p-values;
        None under ``min_images``), ``fewest`` (the fewest beaten images
        that fail: the test's power), ``why``.
    """
    if images < min_images:
        return dict(
            result='inconclusive',
            p_above=None,
            p_below=None,
            fewest=None,
            why=f'{images} images, fewer than the {min_images} a per-image '
            'check needs')
    above = binomtest(beaten, images, allowed, alternative='greater').pvalue
    below = binomtest(beaten, images, allowed, alternative='less').pvalue
    fewest = fewest_failing(images, allowed, alpha)
    result = 'fail' if above < alpha else 'pass'
    why = (f'{"above" if result == "fail" else "not above"} the '
           f'{100 * allowed:g} % allowed (p = {above:.2g}; {fewest} of '
           f'{images} images, {100 * fewest / images:.1f} %, would fail)')
    return dict(
        result=result,
        p_above=float(above),
        p_below=float(below),
        fewest=fewest,
        why=why)


def fewest_failing(images: int,
                   allowed: float = ALLOWED,
                   alpha: float = ALPHA) -> int:
    """The fewest beaten images of ``images`` the share test fails."""
    return int(binom.isf(alpha, images, allowed)) + 1


def image_row(what: str,
              white: Sequence[str],
              weaker: Sequence[str],
              correct: Callable,
              margin: float = IMAGE_MARGIN) -> Optional[Dict]:
    """A per-image row: how many images a cell of ``weaker`` beats the
    per-image worst case over ``white`` on, and the share test.

    Args:
        what (str): What the row compares (``eps 4``).
        white (Sequence[str]): The white-box cells.
        weaker (Sequence[str]): The cells that should not beat them (per
            image the lowest of them counts).
        correct (callable): ``correct(key)`` -> ``(correct, labelled, ...)``
            pixels per image, or None.
        margin (float): :data:`IMAGE_MARGIN`.

    Returns:
        dict | None: ``what``, ``beaten``, ``images``, ``share``, the test's
        fields, ``passed`` (None: inconclusive), ``cell`` (the weaker cell
        that beats the most images), the cells of each side; None without a
        side.
    """
    if not white or not weaker:
        return None
    found = {k: correct(k) for k in [*white, *weaker]}
    if any(f is None for f in found.values()):
        test = dict(
            result='inconclusive',
            p_above=None,
            p_below=None,
            fewest=None,
            why='no per-image areas')
        beaten_by, images = {k: 0 for k in weaker}, 0
        beaten = 0
    else:
        labelled = found[white[0]][1]
        acc = {k: image_accuracy(f[0], labelled) for k, f in found.items()}
        worst = np.min([acc[k] for k in white], axis=0)
        keep = ~np.isnan(worst)
        images = int(keep.sum())
        lowest = np.min([acc[k] for k in weaker], axis=0)
        beaten = int(np.sum(lowest[keep] < worst[keep] - margin))
        beaten_by = {
            k: int(np.sum(acc[k][keep] < worst[keep] - margin))
            for k in weaker
        }
        test = share_test(beaten, images)
    cell = max(weaker, key=lambda k: beaten_by[k])
    return dict(
        what=what,
        beaten=beaten,
        images=images,
        share=beaten / images if images else None,
        margin=margin,
        allowed=ALLOWED,
        **test,
        passed=RESULTS[test['result']],
        excess=beaten / images if images else 0.,
        tolerance=ALLOWED,
        cell=cell,
        first_cells=list(white),
        second_cells=list(weaker))


def image_check(check: str, rows: List[Optional[Dict]], empty: str,
                against: str) -> Dict:
    """A per-image check from its rows: ``passed`` False when a row fails,
    else None (``inconclusive`` True) when a row is inconclusive, else
    True; None without rows (not checked)."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return dict(check=check, passed=None, detail=empty, rows=[])
    order = {'fail': 0, 'inconclusive': 1, 'pass': 2}
    row = min(rows, key=lambda r: (order[r['result']], -(r['share'] or 0)))
    passed = RESULTS[row['result']]
    detail = (f'{row["what"]}: {against} beat the white-box worst case by '
              f'more than {row["margin"]:g} points on {row["beaten"]} of '
              f'{row["images"]} images (most: `{row["cell"]}`); '
              f'{row["why"]}')
    if len(rows) > 1:
        detail += f'; the deciding of {len(rows)} comparisons'
    return dict(
        check=check,
        passed=passed,
        inconclusive=passed is None,
        detail=detail,
        rows=rows)
