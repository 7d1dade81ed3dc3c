"""The gradient-masking audit's eps sweep, read for every swept series
(order-independent), pooled and image by image (docs/evidence.md)."""
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..attacks.cells import QUERY_ATTACKS
from .compare import ROUNDING
from .compare import kind_of as _kind_of
from .compare import lowest, split_key, worst_miou, worst_of
from .images import image_accuracy
from .tolerance import FALLBACK, tolerance

#: The aAcc (percent) the eps sweep must fall to.
FLOOR = 1.0
#: The pixel accuracy (percent) each image must fall to at the largest eps.
IMAGE_FLOOR = 5.0
#: Above this aAcc (percent) two steps in a row (a fourfold eps) that do
#: not fall are a plateau; one such step is a curve's slow start.
PLATEAU = 10.0
#: A step falls when it loses more than its paired tolerance and more than
#: this share of its aAcc.
PLATEAU_FALL = 0.1
#: Points below its clean accuracy an image must have fallen before a
#: return to within :data:`BACK_MARGIN` of it counts as rising back.
BACK_DEPTH = 10.0
BACK_MARGIN = 1.0


def kind_of(key: str) -> str:
    """``'transfer'``, ``'query'``, ``'adaptive'`` or ``'plain'``."""
    return _kind_of(key, QUERY_ATTACKS)


def swept_series(cells: Dict[str, Dict], top: float,
                 sweep: Sequence[float]) -> List[Dict[float, str]]:
    """Every white-box series swept to the sweep's largest eps reached,
    ``{eps: key}`` from ``top``, sorted by name (so the order of the cells
    does not matter), the lowest at that eps first."""
    swept = [
        k for k in cells
        if k.count('/') == 3 and kind_of(k) in ('plain', 'adaptive')
        and split_key(k)[2] in set(sweep) and split_key(k)[2] > top
    ]
    if not swept:
        return []
    far = max(split_key(k)[2] for k in swept)
    ends = sorted(k for k in swept if split_key(k)[2] == far)
    first = lowest(ends, cells)
    out = []
    for end in [first, *[k for k in ends if k != first]]:
        name, norm, _, steps = split_key(end)
        series = {
            split_key(k)[2]: k
            for k in cells
            if k.count('/') == 3 and split_key(k)[:2] == (name, norm) and
            split_key(k)[3] == steps and split_key(k)[2] in set(sweep) | {top}
        }
        at_top = sorted(
            k for k in cells
            if k.count('/') == 3 and split_key(k)[:3] == (name, norm, top))
        if top not in series and at_top:  # the sweep ran with other steps
            series[top] = lowest(at_top, cells)
        out.append(series)
    return out


def sweep_series(cells: Dict[str, Dict], top: float,
                 sweep: Sequence[float]) -> Dict[float, str]:
    """The series swept furthest (:func:`swept_series`' first), or {}."""
    return (swept_series(cells, top, sweep) or [{}])[0]


def image_rows(series: Dict[float, str],
               correct: Callable,
               clean: bool = True) -> List[Dict]:
    """The per-image rows of one series: the images above
    :data:`IMAGE_FLOOR` at its largest eps, and those that rise back to
    their clean accuracy; [] without per-image areas."""
    found = [correct(series[e]) for e in sorted(series)]
    clean = correct('clean') if clean else None
    if any(f is None for f in found):
        return []
    acc = np.array([image_accuracy(f[0], found[0][1]) for f in found])
    end = sorted(series)[-1]
    stuck = np.flatnonzero(acc[-1] > IMAGE_FLOOR)
    rows = [
        image_row(f'eps {end:g} per image', stuck, acc.shape[1], series[end],
                  f'above {IMAGE_FLOOR:g} %')
    ]
    if clean is not None:
        base = image_accuracy(clean[0], clean[1])
        deep = np.minimum.accumulate(acc, 0) <= base - BACK_DEPTH
        back = (acc[1:] >= base - BACK_MARGIN) & deep[:-1] & \
            (acc[1:] > IMAGE_FLOOR)
        where = np.flatnonzero(back.any(0))
        at = [sorted(series)[1 + int(np.argmax(back[:, i]))] for i in where]
        rows.append(
            image_row(
                'rise back per image', where, acc.shape[1], series[end],
                'back at their clean accuracy '
                f'after falling {BACK_DEPTH:g} points', at))
    return rows


def image_row(what: str,
              images: np.ndarray,
              count: int,
              cell: str,
              how: str,
              at: Optional[List[float]] = None) -> Dict:
    """A per-image row of the sweep: one image fails it."""
    where = ', '.join(f'{i} (eps {e:g})' for i, e in zip(images, at or [])) \
        or ', '.join(str(i) for i in images[:8])
    return dict(
        what=what,
        first=float(len(images)),
        second=0.,
        excess=float(len(images)),
        tolerance=0.,
        images=count,
        passed=not len(images),
        cell=cell,
        first_cells=[cell],
        second_cells=[],
        text=f'{len(images)} of {count} images {how}' +
        (f' (images {where})' if len(images) else ''))


def series_rows(series: Dict[float, str], cells: Dict[str, Dict],
                correct: Callable) -> tuple:
    """The rows of one series (the floor, each step's rise or plateau, the
    per-image rows) and its values."""
    values = [(e, k, worst_of([k], cells, correct))
              for e, k in sorted(series.items())]
    e_end, k_end, (a_end, px, labelled) = values[-1]
    tol = tolerance(px, None, labelled)
    rows = [
        dict(
            what=f'eps {e_end:g}',
            first=a_end,
            second=FLOOR,
            excess=a_end - FLOOR,
            tolerance=tol.points,
            images=tol.images,
            passed=bool(a_end - FLOOR <= tol.points + ROUNDING),
            cell=k_end,
            first_cells=[k_end],
            second_cells=[],
            mIoU=worst_miou([k_end], correct),
            curve={
                f'{e:g}': v[0]
                for e, _, v in values
            })
    ]
    steps = []
    for (e0, k0, (a0, px0, _)), (e1, k1, (a1, px1,
                                          lab)) in zip(values, values[1:]):
        points = FALLBACK if px0 is None or px1 is None else tolerance(
            px1, px0, lab).points
        flat = a0 > PLATEAU and \
            a0 - a1 <= max(points, PLATEAU_FALL * a0) + ROUNDING
        steps.append((e0, k0, a0, e1, k1, a1, points, flat))
    for i, (e0, k0, a0, e1, k1, a1, points, flat) in enumerate(steps):
        rise = a1 - a0 > points + ROUNDING and a1 > FLOOR + ROUNDING
        flat_by = [s[-1] for s in (steps[i - 1:i] + steps[i + 1:i + 2])]
        plateau = flat and any(flat_by)  # a fourfold eps without a fall
        rows.append(
            dict(
                what=f'eps {e0:g} -> {e1:g}',
                first=a1,
                second=a0,
                excess=a1 - a0,
                tolerance=points,
                images=tol.images,
                passed=not (rise or plateau),
                plateau=bool(plateau and not rise),
                cell=k1,
                first_cells=[k1],
                second_cells=[k0]))
    return rows + image_rows(series, correct, 'clean' in cells), values, tol


def sweep_check(cells: Dict[str, Dict], correct: Callable, top: float,
                sweep: Sequence[float]) -> Dict:
    """The eps sweep of every swept series: ``rows`` each series' floor,
    steps and per-image rows; the detail is the first failing series' (in
    name order), else the furthest swept's."""
    every = swept_series(cells, top, sweep)
    if not every:
        return dict(
            check='eps sweep', passed=None, detail='no sweep cell', rows=[])
    read = [(s, *series_rows(s, cells, correct)) for s in every]
    failing = [r for r in read if not all(x['passed'] for x in r[1])]
    series, rows, values, tol = (failing or read)[0]
    name, norm, _, steps = split_key(series[max(series)])
    text = ', '.join(f'eps {e:g}: {v[0]:.2f}' for e, _, v in values)
    steps_ = [r for r in rows[1:] if not r['passed'] and 'text' not in r]
    if steps_:
        r = steps_[0]  # the first
        text += (
            f'; it stays above {PLATEAU:g} % from {r["second"]:.2f} '
            f'to {r["first"]:.2f} at {r["what"]}' if r['plateau'] else
            f'; it rises from {r["second"]:.2f} to {r["first"]:.2f} '
            f'at {r["what"]}') + f' (paired tolerance {r["tolerance"]:.2f})'
    elif not rows[0]['passed']:
        stop = next((e for (e, _, a), (_, _, b) in zip(values, values[1:])
                     if b[0] >= a[0]), None)
        text += (f'; it stops falling at eps {stop:g}' if stop is not None else
                 f'; still falling at eps {values[-1][0]:g} (more '
                 'iterations or a larger eps would tell)')
    text += ''.join(
        f'; {r["text"]}' for r in rows
        if 'text' in r and (not r['passed'] or r['what'].startswith('eps')))
    detail = (f'{name}/{norm}/{steps} aAcc {text} (must fall eps after eps '
              f'to {FLOOR:g} % at eps {max(series):g}); {tol}')
    if len(every) > 1:
        detail += (f'; {len(failing)} of {len(every)} series fail'
                   if failing else f'; {len(every)} series pass')
    return dict(
        check='eps sweep',
        passed=not failing,
        detail=detail,
        rows=[r for _, rs, _, _ in read for r in rs])
