"""The corruption grid's numbers: every model's summary (:mod:`.summary`)
and its paired bootstrap against the baseline, from the stored per-image
areas. :mod:`..reports.corruptions` renders them."""
from typing import Dict, List, Optional, Sequence

from ..grid.store import CLEAN, ResultStore, cell_key
from ..seeds.arms import corruption_arms
from ..statistics.paired import bootstrap_or_note
from ..statistics.record import Verdicts, arms_or_runs, record
from ..statistics.summary import robustness_summary


def paired_test(store: ResultStore, name: str, baseline: str,
                corruptions: Sequence[str], severities: Sequence[int],
                resamples: int, seed: int) -> Dict:
    """The paired bootstrap of ``name - baseline`` in mIoU, on the clean
    cell and on mPC (every corrupted cell), from the stored areas.

    Returns:
        dict: ``baseline``, ``metric`` and, for ``clean`` and ``mPC``, the
        :func:`~.bootstrap.paired_bootstrap` result or None with a ``note``.
    """
    store.check_same_images(name, baseline)
    out: Dict = dict(baseline=baseline, metric='mIoU', notes=[])
    corrupted = [cell_key(c, s) for c in corruptions for s in severities]
    for what, keys in (('clean', [CLEAN]), ('mPC', corrupted)):
        pairs = [(store.areas(name, k), store.areas(baseline, k))
                 for k in keys]
        missing = [k for k, p in zip(keys, pairs) if None in p]
        out[what] = bootstrap_or_note(
            [a for a, _ in pairs], [b for _, b in pairs],
            what,
            out['notes'],
            resamples,
            seed,
            missing=f'the per-image areas of '
            f'{", ".join(missing) or "any cell"} are missing (the evaluator '
            'is not mmseg\'s IoUMetric, or the cells were measured before '
            'they were kept).')
    return out


def grid_summary(store: ResultStore,
                 names: Sequence[str],
                 corruptions: Sequence[str],
                 severities: Sequence[int],
                 metric: str = 'mIoU',
                 baseline: Optional[str] = None,
                 means: Sequence[str] = (),
                 resamples: int = 1000,
                 seed: int = 0) -> Dict[str, Dict]:
    """Every model's summary (:func:`~.summary.robustness_summary`) and,
    but for the baseline's, its ``paired`` test against the baseline.

    Returns:
        dict: ``{model: summary}`` (the ``summary`` of ``robustness.json``).
    """
    cells = {n: store.data['models'][n]['cells'] for n in names}
    summary = robustness_summary(cells, corruptions, severities, metric,
                                 baseline, means)
    for name in names:
        summary[name]['paired'] = None if baseline in (None, name) else \
            paired_test(store, name, baseline, corruptions, severities,
                        resamples, seed)
    return summary


def corruption_verdicts(
        store: ResultStore,
        names: Sequence[str],
        corruptions: Sequence[str],
        severities: Sequence[int],
        metric: str = 'mIoU',
        baseline: Optional[str] = None,
        means: Sequence[str] = (),
        resamples: int = 1000,
        seed: int = 0,
        arms: Optional[Dict[str, List[str]]] = None) -> Verdicts:
    """The corruption grid's verdicts, computed once and kept in the store:
    each run's :func:`grid_summary` (its CE and paired test against the
    baseline arm's first run) and the arms
    (:func:`~.arms.corruption_arms`).

    Args:
        baseline (str, optional): The baseline arm.
        arms (dict, optional): ``{arm: [runs]}``; default: each model an
            arm of one run.

    Returns:
        Verdicts: What :func:`~..reports.corruptions.write_robustness_report`
        reads.
    """
    arms = arms_or_runs(names, arms)
    base_run = None if baseline is None else arms[baseline][0]
    summary = grid_summary(store, names, corruptions, severities, metric,
                           base_run, means, resamples, seed)
    by_arm = corruption_arms(store, arms, summary, corruptions, severities,
                             baseline, resamples, seed)
    return record(
        store,
        Verdicts(
            summary,
            by_arm,
            arms,
            settings=dict(
                corruptions=list(corruptions), severities=list(severities))))
