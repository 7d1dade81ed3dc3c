"""The audit's sanity, zero-progress and black-box strength checks, and the
attack's run-to-run spread per image (the rules: docs/evidence.md)."""
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .compare import check_of, compare, split_key, worst_of
from .images import image_accuracy
from .sweep import kind_of

#: Points below its clean accuracy within which an image has not moved.
ZERO_DROP = 0.5
#: Points by which a black-box cell must move an unmoved image (at least;
#: more where the attack's own spread is larger, :func:`spread`).
PROGRESS_MARGIN = 5.0
#: The spread's quantile over the images.
SPREAD_QUANTILE = 0.9
#: The share of the white-box drop the black-box leg must reach.
BLACK_SHARE = 0.25


def accuracy(key: str, correct: Callable) -> Optional[np.ndarray]:
    """Each image's pixel accuracy of a cell, or None."""
    found = correct(key)
    return None if found is None else image_accuracy(found[0], found[1])


def spread(white: Sequence[str], cells: Dict[str, Dict],
           correct: Callable) -> Optional[Dict]:
    """The run-to-run spread of the strongest attack with a doubled twin:
    the :data:`SPREAD_QUANTILE` quantile over images of the change in pixel
    accuracy from its steps to twice them; None without a twin."""
    pairs = []
    for k in white:
        name, norm, e, s = split_key(k)
        twin = f'{name}/{norm}/{e:g}/{2 * s}'
        if twin in cells:
            pairs.append((cells[k].get('aAcc', 101.), k, twin))
    for _, k, twin in sorted(pairs):
        a, b = accuracy(k, correct), accuracy(twin, correct)
        if a is not None and b is not None:
            points = float(np.nanquantile(np.abs(a - b), SPREAD_QUANTILE))
            return dict(points=points, cell=k, twin=twin)
    return None


def progress_row(e: float, white: List[str], black: List[str],
                 cells: Dict[str, Dict], correct: Callable) -> Optional[Dict]:
    """Zero progress at eps ``e``: the images every white-box cell leaves
    within :data:`ZERO_DROP` of clean while a black-box cell takes them
    more than the margin lower (one image fails)."""
    if not white or not black or 'clean' not in cells:
        return None
    found = [accuracy(k, correct) for k in ['clean', *white, *black]]
    if any(f is None for f in found):
        return None
    clean, w = found[0], np.min(found[1:1 + len(white)], 0)
    b = np.min(found[1 + len(white):], 0)
    noise = spread(white, cells, correct)
    margin = max(PROGRESS_MARGIN, noise['points'] if noise else 0.)
    stuck = np.flatnonzero((w >= clean - ZERO_DROP) & (b < clean - margin))
    lowest = min(black, key=lambda k: cells[k].get('aAcc', 101.))
    return dict(
        what=f'eps {e:g}',
        first=float(len(stuck)),
        second=0.,
        excess=float(len(stuck)),
        tolerance=0.,
        margin=margin,
        images=int(np.sum(~np.isnan(clean))),
        passed=not len(stuck),
        cell=lowest,
        stuck=[int(i) for i in stuck],
        spread=noise,
        first_cells=list(white),
        second_cells=list(black))


def progress_check(rows: List[Optional[Dict]]) -> Dict:
    """The zero-progress check from its rows."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return dict(
            check='zero progress',
            passed=None,
            detail='no black-box cell',
            rows=[])
    row = max(rows, key=lambda r: r['excess'])
    noise = row['spread']
    why = (f'the spread of `{noise["cell"]}` with twice the steps, '
           f'{noise["points"]:.2f}' if noise else 'no doubled twin')
    detail = (f'{row["what"]}: {len(row["stuck"])} of {row["images"]} '
              'images left within '
              f'{ZERO_DROP:g} points of their clean accuracy by every '
              'white-box cell while black-box takes them more than '
              f'{row["margin"]:.2f} points lower (margin: at least '
              f'{PROGRESS_MARGIN:g}, {why}); one such image fails')
    if row['stuck']:
        detail += f' (images {", ".join(map(str, row["stuck"][:8]))})'
    return dict(
        check='zero progress',
        passed=all(r['passed'] for r in rows),
        detail=detail,
        rows=rows)


def sanity_check(cells: Dict[str, Dict], correct: Callable) -> Dict:
    """No white-box cell above the clean accuracy beyond the paired
    tolerance (at any eps: an attack that helps the model is broken)."""
    white = sorted(
        k for k in cells
        if k.count('/') == 3 and kind_of(k) in ('plain', 'adaptive'))
    rows = [compare(k, [k], ['clean'], cells, correct, k)
            for k in white] if 'clean' in cells else []
    return check_of(
        'sanity', rows, 'no clean cell',
        lambda r: f'`{r["cell"]}` {r["first"]:.2f} vs clean '
        f'{r["second"]:.2f} (no white-box cell above clean)')


def strength_check(epsilons: Sequence[float], white: Dict[float, List[str]],
                   black: Dict[float, List[str]], cells: Dict[str, Dict],
                   correct: Callable) -> Dict:
    """The black-box leg's strength at each headline eps where the
    white-box worst case moves beyond its tolerance: its aAcc drop (square
    and transfers apart too) against :data:`BLACK_SHARE` of the white-box
    drop; too weak at the largest such eps: inconclusive."""
    rows = []
    for e in epsilons:
        down = compare(f'eps {e:g}', ['clean'], white[e], cells, correct) \
            if white[e] and black[e] and 'clean' in cells else None
        if down is None or down['passed']:
            continue  # white-box does not move the model here
        clean = worst_of(['clean'], cells, correct)[0]
        legs = {
            leg: clean - worst_of(keys, cells, correct)[0]
            for leg, keys in (
                ('black-box', black[e]),
                ('square', [k for k in black[e] if kind_of(k) == 'query']),
                ('transfers',
                 [k for k in black[e] if kind_of(k) == 'transfer'])) if keys
        }
        need = BLACK_SHARE * down['excess']
        rows.append(
            dict(
                down,
                legs=legs,
                need=need,
                passed=bool(legs['black-box'] >= need),
                cell=min(black[e], key=lambda k: cells[k]['aAcc'])))
    if not rows:
        return dict(
            check='black-box strength',
            passed=None,
            detail='no eps where both legs move the model',
            rows=[])
    row = rows[-1]
    legs = ', '.join(f'{k} {v:.2f}' for k, v in row['legs'].items())
    detail = (f'{row["what"]}: aAcc drop of {legs} points (lowest '
              f'`{row["cell"]}`), white-box {row["excess"]:.2f}; needed '
              f'{BLACK_SHARE:g} of it, {row["need"]:.2f}')
    if not row['passed']:
        detail += '; too weak to see masking'
    weak = [r['what'] for r in rows[:-1] if not r['passed']]
    if weak:
        detail += f'; weak at {", ".join(weak)} too' if not row['passed'] \
            else f'; weak at {", ".join(weak)} (not decisive)'
    note = '; '.join(
        f'{leg} move{"s" * (leg == "square")} aAcc by {v:.2f} points at '
        f'{row["what"]} where '
        f'white-box moves it by {row["excess"]:.2f}'
        for leg, v in row['legs'].items()
        if leg != 'black-box' and v < row['need'])
    return dict(
        check='black-box strength',
        passed=True if row['passed'] else None,
        inconclusive=not row['passed'],
        detail=detail,
        note=note and f'weak black-box leg: {note}',
        rows=rows)
