"""The field's robustness numbers of a grid: P, mPC, rPC, CE, mCE, rmCE.

With ``m(c, s)`` the metric (a percentage, e.g. mIoU) under corruption ``c``
at severity ``s`` and ``m_clean`` the clean one:

* ``P = m_clean``; ``mPC`` the mean of ``m(c, s)`` over every corrupted cell;
  ``rPC = mPC / P`` (Michaelis et al. 2019; mmdet's ``test_robustness.py``).
* ``CE_c = sum_s (100 - m(c, s)) / sum_s (100 - m_base(c, s))`` with the
  error ``100 - m`` and ``m_base`` the baseline model's, and ``mCE`` the mean
  over ``c``; ``rCE_c = sum_s (m_clean - m(c, s)) / sum_s (m_base_clean -
  m_base(c, s))`` and ``rmCE`` its mean (Hendrycks & Dietterich, ICLR 2019).

A ratio whose denominator is 0 is undefined (None) and a note says so; a
mean over an undefined value or a missing cell is None too.
"""
from typing import Callable, Dict, List, Optional, Sequence

from ..corruption.cells import GROUPS
from ..grid.store import CLEAN, cell_key
from .sea import sea_worst_case
from .worst import greedy_worst_case, worst_record

Number = Optional[float]


def _mean(values: Sequence[Number]) -> Number:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def _ratio(num: Number, den: Number, what: str, notes: List[str]) -> Number:
    if num is None or den is None:
        return None
    if den == 0:
        notes.append(f'{what} is undefined: its denominator is 0.')
        return None
    return num / den


def _sum(values: Sequence[Number]) -> Number:
    return None if any(v is None for v in values) else sum(values)


def grid_scores(cells: Dict[str, Dict], corruptions: Sequence[str],
                severities: Sequence[int], metric: str) -> Dict[str, List]:
    """``{corruption: [metric per severity]}`` of one model (None: missing).

    Args:
        cells (dict): ``{cell_key: metrics}`` of one model.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): Metric name.

    Returns:
        dict: The grid.
    """
    return {
        c: [cells.get(cell_key(c, s), {}).get(metric) for s in severities]
        for c in corruptions
    }


def model_summary(
    cells: Dict[str, Dict],
    corruptions: Sequence[str],
    severities: Sequence[int],
    metric: str = 'mIoU',
    base_cells: Optional[Dict[str, Dict]] = None,
    means: Sequence[str] = ()
) -> Dict:
    """P, mPC, rPC and, against a baseline, CE, mCE, rCE and rmCE.

    Args:
        cells (dict): ``{cell_key: metrics}`` of the model.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): The metric (a percentage). Defaults to ``'mIoU'``.
        base_cells (dict, optional): The baseline's cells; without them the
            corruption errors are None.
        means (Sequence[str]): Further metrics whose clean value and mean
            over the corrupted cells to give (``means``).

    Returns:
        dict: ``P``, ``mPC``, ``rPC``, ``mCE``, ``rmCE``, ``CE`` and ``rCE``
        (per corruption), ``groups`` (``mPC``, ``mCE``, ``rmCE`` of each
        group present), ``means``, ``grid``, ``per_corruption`` (mean over
        severities) and ``notes``.
    """
    notes: List[str] = []
    grid = grid_scores(cells, corruptions, severities, metric)
    clean = cells.get(CLEAN, {}).get(metric)
    flat = [v for c in corruptions for v in grid[c]]
    if None in flat or clean is None:
        notes.append(f'{flat.count(None) + (clean is None)} cells have no '
                     f'{metric} yet: the means that need them are None.')
    out = dict(
        P=clean,
        mPC=_mean(flat),
        grid=grid,
        per_corruption={c: _mean(grid[c])
                        for c in corruptions})
    out['rPC'] = _ratio(out['mPC'], clean, 'rPC', notes)
    ce: Dict[str, Number] = {c: None for c in corruptions}
    rce: Dict[str, Number] = {c: None for c in corruptions}
    if base_cells is not None:
        base = grid_scores(base_cells, corruptions, severities, metric)
        base_clean = base_cells.get(CLEAN, {}).get(metric)
        for c in corruptions:
            err = _sum([None if v is None else 100 - v for v in grid[c]])
            base_err = _sum([None if v is None else 100 - v for v in base[c]])
            ce[c] = _ratio(err, base_err, f'CE of {c}', notes)
            drop = _sum([
                None if v is None or clean is None else clean - v
                for v in grid[c]
            ])
            base_drop = _sum([
                None if v is None or base_clean is None else base_clean - v
                for v in base[c]
            ])
            rce[c] = _ratio(drop, base_drop, f'rCE of {c}', notes)
    else:
        notes.append('No baseline: CE, mCE, rCE and rmCE are None.')
    out.update(
        CE=ce,
        rCE=rce,
        mCE=_mean(list(ce.values())),
        rmCE=_mean(list(rce.values())))
    out['groups'] = {}
    for group, names in GROUPS.items():
        members = [c for c in corruptions if c in names]
        if members:
            out['groups'][group] = dict(
                corruptions=members,
                mPC=_mean([v for c in members for v in grid[c]]),
                mCE=_mean([ce[c] for c in members]),
                rmCE=_mean([rce[c] for c in members]))
    out['means'] = {
        k:
        dict(
            clean=cells.get(CLEAN, {}).get(k),
            corrupted=_mean([
                cells.get(cell_key(c, s), {}).get(k) for c in corruptions
                for s in severities
            ]))
        for k in means
    }
    out['notes'] = notes
    return out


def robustness_summary(cells: Dict[str, Dict],
                       corruptions: Sequence[str],
                       severities: Sequence[int],
                       metric: str = 'mIoU',
                       baseline: Optional[str] = None,
                       means: Optional[Sequence[str]] = None) -> Dict:
    """:func:`model_summary` of every model against one baseline.

    Args:
        cells (dict): ``{model: {cell_key: metrics}}``.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): The metric. Defaults to ``'mIoU'``.
        baseline (str, optional): The model the corruption errors divide by
            (its own mCE is 1); None: no corruption errors.
        means (Sequence[str]): See :func:`model_summary`.

    Returns:
        dict: ``{model: summary}``, each with ``baseline`` and ``metric``.
    """
    if baseline is not None and baseline not in cells:
        raise ValueError(f'baseline {baseline!r} is none of the models '
                         f'{list(cells)}.')
    base = None if baseline is None else cells[baseline]
    means = means or ()
    return {
        name:
        dict(
            model_summary(c, corruptions, severities, metric, base, means),
            baseline=baseline,
            metric=metric)
        for name, c in cells.items()
    }


def attack_series(keys: Sequence[str]) -> Dict[str, Dict[float, str]]:
    """The attack cells of a store by series: ``{'ATTACK/NORM/STEPS':
    {eps: cell_key}}`` (keys ``ATTACK/NORM/EPS/STEPS``; others ignored)."""
    series: Dict[str, Dict[float, str]] = {}
    for key in keys:
        parts = key.split('/')
        if len(parts) != 4:
            continue
        name, norm, eps, steps = parts
        series.setdefault(f'{name}/{norm}/{steps}', {})[float(eps)] = key
    return {s: dict(sorted(e.items())) for s, e in sorted(series.items())}


def attack_model_summary(cells: Dict[str, Dict],
                         areas: Callable,
                         metric: str = 'mIoU',
                         labelled: Optional[Callable] = None,
                         epsilons: Optional[Sequence[float]] = None,
                         seed: int = 0) -> Dict:
    """One model's attack grid: the clean metric, each series' metric per
    eps, SEA's worst case over every attack cell at each eps
    (:func:`~.worst.greedy_worst_case`), and the means over eps.

    Args:
        cells (dict): ``{cell_key: metrics}`` of the model.
        areas (callable): ``areas(cell_key)`` -> :class:`ImageAreas` or None.
        metric (str): The metric of the series. Defaults to ``'mIoU'``.
        labelled (callable, optional): ``labelled(cell_key)`` -> the
            labelled pixels per image, or None (then the worst aAcc is None).
        epsilons (Sequence[float], optional): The headline eps that get a
            worst case (default: every eps of the cells).
        seed (int): Seed of the greedy search's order. Defaults to 0.

    Returns:
        dict: ``clean``, ``series`` (``{series: {eps: value}}``), ``worst``
        (``{eps: {'mIoU', 'aAcc', 'choice', 'cells', 'mIoU_sea',
        'aAcc_sea', 'sea_start'}}``, see :func:`~.worst.worst_record` and
        :func:`sea_record`; None where areas are missing),
        ``mean_over_eps`` (``{series or 'worst': value}``, over the
        headline eps), ``worst_areas``
        (``{eps: ImageAreas}``, not JSON), ``series_keys``
        (:func:`attack_series`, not JSON) and ``notes``.
    """
    notes: List[str] = []
    series = attack_series(list(cells))
    out: Dict = dict(
        clean=cells.get(CLEAN, {}).get(metric),
        series={
            s: {
                f'{e:g}': cells[k].get(metric)
                for e, k in eps.items()
            }
            for s, eps in series.items()
        },
        worst={},
        worst_areas={},
        series_keys=series,
        notes=notes)
    found_eps = sorted({e for eps in series.values() for e in eps})
    if epsilons is not None:
        found_eps = [e for e in found_eps if e in set(epsilons)]
    for e in found_eps:
        keys = [eps[e] for eps in series.values() if e in eps]
        found = [areas(k) for k in keys]
        if any(a is None for a in found):
            notes.append(f'No worst case at eps {e:g}: per-image areas are '
                         'missing (the evaluator is not IoUMetric).')
            out['worst'][f'{e:g}'] = None
            continue
        counts = [labelled(k) for k in keys] if labelled else []
        counts = [c for c in counts if c is not None]
        if not counts:
            notes.append(f'No worst-case aAcc at eps {e:g}: the store keeps '
                         'no labelled pixels per image (an older version).')
        result = greedy_worst_case(found, counts[0] if counts else None, seed)
        out['worst_areas'][f'{e:g}'] = result.areas
        out['worst'][f'{e:g}'] = worst_record(result, keys)
        out['worst'][f'{e:g}'].update(
            sea_record(found, keys, counts[0] if counts else None))
    headline = {f'{e:g}' for e in found_eps}
    out['mean_over_eps'] = {
        s: _mean([v for e, v in values.items() if e in headline])
        for s, values in out['series'].items()
    }
    out['mean_over_eps']['worst'] = _mean(
        [None if w is None else w['mIoU'] for w in out['worst'].values()])
    return out


def sea_start(keys: Sequence[str], found: Sequence) -> int:
    """The cell SEA's search starts from: APGD-MCE-Bal's (the one of lowest
    accuracy when there are several: plain, adaptive, doubled steps), else
    the cell of lowest accuracy."""
    bal = [
        i for i, k in enumerate(keys)
        if k.split('/')[0] in ('apgd-mce-bal', 'apgd-mce-bal-adaptive')
    ]
    pool = bal or range(len(keys))
    return min(pool, key=lambda i: found[i].intersect.sum())


def sea_record(found: Sequence, keys: Sequence[str],
               labelled: Optional[object]) -> Dict:
    """SEA's own numbers beside the worst case's (:mod:`.sea`):
    ``mIoU_sea`` (SEA's search as released), ``aAcc_sea`` (the mean over
    images of each image's worst accuracy) and ``sea_start``."""
    start = sea_start(keys, found)
    sea = sea_worst_case(found, start, labelled)
    return dict(mIoU_sea=sea.miou, aAcc_sea=sea.aacc, sea_start=keys[start])
