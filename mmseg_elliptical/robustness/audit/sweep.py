"""The gradient-masking audit's eps sweep: the white-box series swept
furthest must fall, eps after eps (no rise beyond the paired tolerance
above the floor), to :data:`FLOOR` at the sweep's largest eps."""
from typing import Callable, Dict, Sequence

from ..attacks.cells import QUERY_ATTACKS
from .compare import ROUNDING
from .compare import kind_of as _kind_of
from .compare import lowest, split_key, worst_miou, worst_of
from .tolerance import FALLBACK, tolerance

#: The aAcc (percent) the eps sweep must fall to.
FLOOR = 1.0


def kind_of(key: str) -> str:
    """``'transfer'``, ``'query'``, ``'adaptive'`` or ``'plain'``."""
    return _kind_of(key, QUERY_ATTACKS)


def sweep_series(cells: Dict[str, Dict], top: float,
                 sweep: Sequence[float]) -> Dict[float, str]:
    """``{eps: key}`` of the white-box series swept furthest (the lowest
    aAcc at the sweep's largest eps), from the largest headline eps
    ``top``; empty without a swept cell."""
    swept = [
        k for k in cells
        if k.count('/') == 3 and kind_of(k) in ('plain', 'adaptive')
        and split_key(k)[2] in set(sweep) and split_key(k)[2] > top
    ]
    if not swept:
        return {}
    far = max(split_key(k)[2] for k in swept)
    name, norm, _, steps = split_key(
        lowest([k for k in swept if split_key(k)[2] == far], cells))
    series = {
        split_key(k)[2]: k
        for k in cells
        if k.count('/') == 3 and split_key(k)[:2] == (name, norm)
        and split_key(k)[3] == steps and split_key(k)[2] in set(sweep) | {top}
    }
    at_top = [
        k for k in cells
        if k.count('/') == 3 and split_key(k)[:3] == (name, norm, top)
    ]
    if top not in series and at_top:  # the sweep ran with other steps
        series[top] = lowest(at_top, cells)
    return series


def sweep_check(cells: Dict[str, Dict], correct: Callable, top: float,
                sweep: Sequence[float]) -> Dict:
    """The eps sweep: ``rows`` the floor at the largest eps, then each
    step from one eps to the next (its rise against the paired
    tolerance)."""
    series = sweep_series(cells, top, sweep)
    if not series:
        return dict(
            check='eps sweep', passed=None, detail='no sweep cell', rows=[])
    name, norm, _, steps = split_key(series[max(series)])
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
    for (e0, k0, (a0, px0, _)), (e1, k1, (a1, px1,
                                          lab)) in zip(values, values[1:]):
        points = FALLBACK if px0 is None or px1 is None else tolerance(
            px1, px0, lab).points
        rows.append(
            dict(
                what=f'eps {e0:g} -> {e1:g}',
                first=a1,
                second=a0,
                excess=a1 - a0,
                tolerance=points,
                images=tol.images,
                passed=bool(a1 - a0 <= points + ROUNDING
                            or a1 <= FLOOR + ROUNDING),
                cell=k1,
                first_cells=[k1],
                second_cells=[k0]))
    passed = all(r['passed'] for r in rows)
    text = ', '.join(f'eps {e:g}: {v[0]:.2f}' for e, _, v in values)
    rises = [r for r in rows[1:] if not r['passed']]
    if rises:
        r = rises[0]  # the first
        text += (f'; it rises from {r["second"]:.2f} to {r["first"]:.2f} '
                 f'at {r["what"]} (paired tolerance {r["tolerance"]:.2f})')
    elif not rows[0]['passed']:
        stop = next((e for (e, _, a), (_, _, b) in zip(values, values[1:])
                     if b[0] >= a[0]), None)
        text += (f'; it stops falling at eps {stop:g}' if stop is not None else
                 f'; still falling at eps {values[-1][0]:g} (more '
                 'iterations or a larger eps would tell)')
    return dict(
        check='eps sweep',
        passed=passed,
        detail=f'{name}/{norm}/{steps} aAcc {text} (must fall eps after eps '
        f'to {FLOOR:g} % at eps {e_end:g}); {tol}',
        rows=rows)
