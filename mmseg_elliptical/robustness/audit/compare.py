"""The gradient-masking audit's comparisons: the worst case (per-image
minimum) over one set of a model's cells against another's, with the
tolerance of :mod:`.tolerance`; each comparison is a JSON row, and a check
is decided by its rows (:func:`check_of`)."""
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..grid.areas import miou
from .tolerance import Tolerance, aacc, tolerance

#: Rounding allowed on top of a tolerance (aAcc points).
ROUNDING = 1e-9


def kind_of(key: str, query_attacks: Sequence[str]) -> str:
    """``'transfer'``, ``'query'``, ``'remedy'`` (BPDA or EOT: not the
    checks' cells), ``'adaptive'`` or ``'plain'``."""
    name = key.split('/')[0]
    if '@' in name:
        return 'transfer'
    if name in query_attacks:
        return 'query'
    if '-bpda' in name or '-eot' in name:
        return 'remedy'
    return 'adaptive' if name.endswith('-adaptive') else 'plain'


def split_key(key: str) -> tuple:
    """``(attack, norm, eps, steps)`` of ``ATTACK/NORM/EPS/STEPS``."""
    name, norm, eps, steps = key.split('/')
    return name, norm, float(eps), int(steps)


def worst_of(keys: Sequence[str], cells: Dict[str, Dict],
             correct: Callable) -> tuple:
    """``(aAcc, correct, labelled)`` of the per-image minimum over ``keys``
    (``correct(key)``: ``(correct, labelled)`` pixels per image, or None:
    then the lowest pooled aAcc of the cells, a weaker bound, and None
    pixels)."""
    found = [correct(k) for k in keys]
    if found and all(f is not None for f in found):
        right = np.min([f[0] for f in found], axis=0)
        return aacc(right, found[0][1]), right, found[0][1]
    values = [cells.get(k, {}).get('aAcc') for k in keys]
    if not values or None in values:
        return None, None, None
    return float(min(values)), None, None


def worst_miou(keys: Sequence[str], correct: Callable) -> Optional[float]:
    """The mIoU (percent) of the per-image minimum-accuracy choice over
    ``keys``, where ``correct(key)`` also gives the cell's
    :class:`~..grid.areas.ImageAreas` (its third item); else None."""
    found = [correct(k) for k in keys]
    if not found or any(f is None or len(f) < 3 for f in found):
        return None
    right = np.stack([f[0] for f in found])
    choice, images = right.argmin(0), np.arange(right.shape[1])
    inter = np.stack([f[2].intersect for f in found])[choice, images]
    union = np.stack([f[2].union for f in found])[choice, images]
    return float(
        miou(inter.sum(0).astype(np.float64),
             union.sum(0).astype(np.float64)))


def lowest(keys: Sequence[str], cells: Dict[str, Dict]) -> str:
    """The key of ``keys`` with the lowest pooled aAcc."""
    return min(keys, key=lambda k: cells[k].get('aAcc', 101.))


def compare(what: str,
            first: Sequence[str],
            second: Sequence[str],
            cells: Dict[str, Dict],
            correct: Callable,
            named: Optional[str] = None,
            own: bool = False,
            margin: float = 0.,
            **extra) -> Optional[Dict]:
    """A row: whether the worst case over ``first`` is at most the worst
    over ``second`` plus the tolerance of their paired difference.

    Args:
        what (str): What the row compares (``eps 4``).
        first, second (Sequence[str]): The cells of each side.
        cells (dict): The model's cells.
        correct (callable): Per-image pixels of a cell, or None.
        named (str, optional): The cell that decides the row (the failing
            cell a reader looks at).
        own (bool): The tolerance is the interval of ``first``'s own aAcc
            (the precision of the number itself), not of the paired
            difference: a change below it does not move the number beyond
            its own interval.
        margin (float): aAcc points allowed on top of the tolerance (a
            stated margin: the check fails only when the data show more).
        **extra: More JSON fields.

    Returns:
        dict | None: ``what``, ``first``, ``second`` (aAcc), ``excess``
        (their difference), ``tolerance``, ``margin``, ``images``,
        ``passed``, ``cell``, the cells of each side and their mIoU
        (``first_mIoU``, ``second_mIoU``; None without areas); None without
        a side.
    """
    a, a_px, labelled = worst_of(first, cells, correct)
    b, b_px, _ = worst_of(second, cells, correct)
    if a is None or b is None:
        return None
    if a_px is None or b_px is None:
        tol = tolerance(None, None, None)
    else:
        tol = tolerance(a_px, None if own else b_px, labelled)
    return dict(
        what=what,
        first=a,
        second=b,
        excess=a - b,
        tolerance=tol.points,
        images=tol.images,
        own=own,
        margin=margin,
        passed=bool(a - b <= tol.points + margin + ROUNDING),
        cell=named,
        first_cells=list(first),
        second_cells=list(second),
        first_mIoU=worst_miou(first, correct),
        second_mIoU=worst_miou(second, correct),
        **extra)


def tolerance_text(row: Dict) -> str:
    """The tolerance of a row, as :class:`~.tolerance.Tolerance` says it
    (with its margin), and the two sides' mIoU where known."""
    text = str(Tolerance(row['tolerance'], row['images'], row.get('own')))
    if row.get('margin'):
        text += f' + margin {row["margin"]:.2f}'
    if row.get('first_mIoU') is not None and \
            row.get('second_mIoU') is not None:
        text += (f'; mIoU {row["first_mIoU"]:.2f} vs '
                 f'{row["second_mIoU"]:.2f}')
    return text


def deciding(rows: List[Dict]) -> Dict:
    """The row that decides a check: the failing row furthest over its
    tolerance, else the passing row closest to it."""
    failed = [r for r in rows if not r['passed']]
    if failed:
        return max(failed, key=lambda r: r['excess'] - over(r))
    return min(rows, key=lambda r: over(r) - r['excess'])


def over(row: Dict) -> float:
    """What a row allows: its tolerance and margin."""
    return row['tolerance'] + row.get('margin', 0.)


def check_of(check: str, rows: List[Optional[Dict]], empty: str,
             say: Callable[[Dict], str]) -> Dict:
    """A check from its rows: passed when every row passes (None without
    any), ``detail`` the deciding row in words (``say(row)``) with its
    tolerance and how many rows failed, ``rows`` every row (for the
    JSON)."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return dict(check=check, passed=None, detail=empty, rows=[])
    row = deciding(rows)
    failed = sum(not r['passed'] for r in rows)
    detail = f'{say(row)}; {tolerance_text(row)}'
    if len(rows) > 1:
        detail += (f'; {failed} of {len(rows)} comparisons fail'
                   if failed else f'; the closest of {len(rows)} comparisons')
    return dict(check=check, passed=not failed, detail=detail, rows=rows)
