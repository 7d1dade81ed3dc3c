"""The audit's per-class check: each class's IoU under the white-box cells
against the black-box cells and, at the sweep's largest eps, against a
floor (the rule and its power: docs/evidence.md)."""
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .tolerance import LEVEL, RESAMPLES

#: IoU points (on top of the paired tolerance) by which a black-box cell
#: may leave a class below every white-box cell.
CLASS_MARGIN = 2.0
#: The IoU (percent) each class must fall to at the sweep's largest eps.
CLASS_FLOOR = 5.0


def areas_of(keys: Sequence[str], correct: Callable) -> Optional[list]:
    """Each cell's :class:`~..grid.areas.ImageAreas`, or None."""
    found = [correct(k) for k in keys]
    if not found or any(f is None or len(f) < 3 for f in found):
        return None
    return [f[2] for f in found]


def class_iou(areas) -> np.ndarray:
    """``[classes]`` IoU (percent) of one cell's summed areas (NaN: the
    class is absent)."""
    union = areas.union.sum(0).astype(np.float64)
    return np.divide(
        100 * areas.intersect.sum(0),
        union,
        out=np.full(union.shape, np.nan),
        where=union > 0)


def class_tolerance(first, second, seed: int = 0) -> np.ndarray:
    """``[classes]`` tolerance of IoU(first) - IoU(second), the paired
    bootstrap over the images (as :func:`~.tolerance.tolerance`)."""
    n = first.union.shape[0]
    draws = np.random.default_rng(seed).integers(0, n, (RESAMPLES, n))

    def iou(a):
        return 100 * a.intersect[draws].sum(1) / np.maximum(
            a.union[draws].sum(1), 1)

    stats = iou(first) - iou(second)
    point = class_iou(first) - class_iou(second)
    low = np.quantile(stats, (1 - LEVEL) / 2, axis=0)
    return np.maximum(np.nan_to_num(point - low), 0.)


def class_row(what: str, white: Sequence[str], black: Sequence[str],
              correct: Callable) -> Optional[Dict]:
    """The classes a black-box cell leaves more than the tolerance and
    :data:`CLASS_MARGIN` below every white-box cell."""
    w, b = areas_of(white, correct), areas_of(black, correct)
    if not white or not black or w is None or b is None:
        return None
    w_iou, b_iou = np.array([class_iou(a) for a in w]), \
        np.array([class_iou(a) for a in b])
    wi, bi = np.nanargmin(np.nan_to_num(w_iou, nan=101.), 0), \
        np.nanargmin(np.nan_to_num(b_iou, nan=101.), 0)
    classes = np.flatnonzero(~np.isnan(w_iou[0]))
    out = []
    for c in classes:
        first, second = w_iou[wi[c], c], b_iou[bi[c], c]
        tol = float(class_tolerance(w[wi[c]], b[bi[c]])[c])
        out.append(
            dict(
                cls=int(c),
                first=float(first),
                second=float(second),
                tolerance=tol,
                cell=black[bi[c]],
                passed=bool(first - second <= tol + CLASS_MARGIN)))
    return dict(
        what=what,
        classes=out,
        passed=all(r['passed'] for r in out),
        images=int(w[0].union.shape[0]))


def floor_row(key: str, correct: Callable) -> Optional[Dict]:
    """The classes above :data:`CLASS_FLOOR` IoU at the sweep's largest
    eps (``key``: a swept series' cell there)."""
    found = areas_of([key], correct)
    if found is None:
        return None
    iou = class_iou(found[0])
    over = [int(c) for c in np.flatnonzero(np.nan_to_num(iou) > CLASS_FLOOR)]
    return dict(
        what=key,
        classes=[dict(cls=c, first=float(iou[c]), passed=False) for c in over],
        passed=not over,
        images=int(found[0].union.shape[0]))


def class_check(rows: List[Optional[Dict]]) -> Dict:
    """The per-class check from its rows (one class fails it)."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return dict(
            check='per class',
            passed=None,
            detail='no per-class areas',
            rows=[])
    bad = [(r, c) for r in rows for c in r['classes'] if not c['passed']]
    if bad:
        r, c = max(bad, key=lambda x: ('second' in x[1], x[1]['first']))
        detail = (f'{r["what"]}: class {c["cls"]} IoU {c["first"]:.2f}' +
                  (f' under every white-box cell vs `{c["cell"]}` '
                   f'{c["second"]:.2f} (tolerance {c["tolerance"]:.2f} + '
                   f'margin {CLASS_MARGIN:g})' if 'second' in c else
                   f', above the {CLASS_FLOOR:g} % floor'))
        detail += f'; {len(bad)} class rows fail'
    else:
        paired = [(r, c) for r in rows for c in r['classes']]
        detail = f'no class kept above its black-box IoU or above the ' \
            f'{CLASS_FLOOR:g} % floor at the largest eps'
        if paired:
            r, c = max(paired, key=lambda x: x[1]['tolerance'])
            detail += (f'; power: a class {c["tolerance"]:.2f} + '
                       f'{CLASS_MARGIN:g} IoU points above black-box is '
                       f'caught (the widest, class {c["cls"]} at '
                       f'{r["what"]}, {r["images"]} images)')
    return dict(check='per class', passed=not bad, detail=detail, rows=rows)
