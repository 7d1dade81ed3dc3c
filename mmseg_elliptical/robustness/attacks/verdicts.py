"""The attack grid's numbers: every model's summary
(:func:`~.summary.attack_model_summary`) and its paired tests against the
baseline, from the stored per-image areas. :mod:`..reports.attacks` renders
them."""
from functools import lru_cache
from typing import Callable, Dict, List, Optional, Sequence

from ..audit.verdict import gradient_masking_audit
from ..grid.store import ResultStore
from ..seeds.arms import attack_arms
from ..statistics.paired import bootstrap_or_note, fold_notes
from ..statistics.record import Verdicts, arms_or_runs, record
from ..statistics.summary import attack_model_summary


def baseline_key(store: ResultStore, baseline: str, key: str) -> str:
    """The baseline's cell that ``key`` is compared with: the same, or the
    plain attack where the baseline has no adaptive one (no ``m``)."""
    if store.get(baseline, key) is None and '-adaptive/' in key:
        return key.replace('-adaptive/', '/', 1)
    return key


def correct_pixels(store: ResultStore, name: str, key: str,
                   read: Callable) -> Optional[tuple]:
    """``(correct, labelled, areas)`` pixels per image of a cell and its
    :class:`~..grid.areas.ImageAreas`, or None."""
    areas, labelled = read(name, key), store.labelled(name, key)
    if areas is None or labelled is None:
        return None
    return areas.intersect.sum(1), labelled, areas


def attack_summary(store: ResultStore,
                   names: Sequence[str],
                   baseline: Optional[str] = None,
                   resamples: int = 1000,
                   seed: int = 0,
                   epsilons: Optional[Sequence[float]] = None,
                   audit: Optional[Dict[str, bool]] = None,
                   worst_areas: Optional[Dict] = None) -> Dict[str, Dict]:
    """Every model's :func:`~.summary.attack_model_summary` and, but for the
    baseline's, ``paired``: the paired bootstrap of ``model - baseline`` in
    mIoU of each series and of the worst case at each eps, and of the worst
    case's mean over eps. ``epsilons``: the headline eps that get a worst
    case (default: every eps of the store). ``audit``: ``{model: whether it
    has elliptical layers}``; then each model gets ``audit``
    (:func:`~.audit.gradient_masking_audit` at the headline eps).
    ``worst_areas``: a dict that receives ``{model: {eps: ImageAreas}}``,
    the worst cases chosen (the arms' tests reuse them).

    Returns:
        dict: ``{model: summary}`` (the ``summary`` of ``adversarial.json``).
    """
    read = lru_cache(maxsize=None)(store.areas)  # each file read once
    out = {}
    for name in names:
        out[name] = attack_model_summary(
            store.data['models'][name]['cells'],
            lambda key, n=name: read(n, key),
            labelled=lambda key, n=name: store.labelled(n, key),
            epsilons=epsilons)
        out[name]['baseline'] = baseline
    if audit is not None:
        headline = epsilons or sorted(
            {float(e)
             for s in out.values()
             for e in s['worst']})
        for name in names:
            out[name]['audit'] = gradient_masking_audit(
                store.data['models'][name]['cells'],
                lambda key, n=name: correct_pixels(store, n, key, read),
                headline,
                audit.get(name, False))
    for name in names:
        s = out[name]
        s['paired'] = None
        if baseline in (None, name):
            continue
        store.check_same_images(name, baseline)
        base = out[baseline]
        paired: Dict = dict(series={}, worst={}, notes=[])

        def test(a: list, b: list, what: str) -> Optional[Dict]:
            return bootstrap_or_note(a, b, what, paired['notes'], resamples,
                                     seed)

        adaptive, unpaired = [], []
        for series, eps in s['series_keys'].items():
            paired['series'][series] = {}
            for e, k in eps.items():
                other = baseline_key(store, baseline, k)
                if store.get(baseline, other) is None:
                    unpaired += [series] * (series not in unpaired)
                    continue  # e.g. a transfer from the baseline itself
                adaptive += [series] * (other != k and series not in adaptive)
                paired['series'][series][f'{e:g}'] = test(
                    [read(name, k)], [read(baseline, other)],
                    f'{series} {e:g}')
        if adaptive:
            paired['notes'].append(
                f'{", ".join(adaptive)}: compared with {baseline}\'s plain '
                'attack of the same name (without elliptical layers the two '
                'are one).')
        if unpaired:
            paired['notes'].append(
                f'{", ".join(unpaired)}: no paired test, {baseline} has no '
                'such cells (a transfer from itself).')
        for e, areas in s['worst_areas'].items():
            paired['worst'][e] = test([areas], [base['worst_areas'].get(e)],
                                      f'the worst case at eps {e}')
        common = [e for e in s['worst_areas'] if e in base['worst_areas']]
        paired['worst_mean'] = test(
            [s['worst_areas'][e]
             for e in common], [base['worst_areas'][e] for e in common],
            'the worst case over eps') if common else None
        paired['notes'] = fold_notes(paired['notes'])
        s['paired'] = paired
    for name, s in out.items():
        areas = s.pop('worst_areas')
        if worst_areas is not None:
            worst_areas[name] = areas
        s.pop('series_keys')
    return out


def attack_verdicts(store: ResultStore,
                    names: Sequence[str],
                    baseline: Optional[str] = None,
                    resamples: int = 1000,
                    seed: int = 0,
                    epsilons: Optional[Sequence[float]] = None,
                    audit: Optional[Dict[str, bool]] = None,
                    arms: Optional[Dict[str, List[str]]] = None) -> Verdicts:
    """The attack grid's verdicts, computed once and kept in the store:
    each run's :func:`attack_summary` (worst case, paired tests against the
    baseline arm's first run, the audit) and the arms
    (:func:`~.arms.attack_arms`, on the worst cases the summary chose).

    Args:
        baseline (str, optional): The baseline arm.
        epsilons, audit: See :func:`attack_summary`.
        arms (dict, optional): ``{arm: [runs]}``; default: each model an
            arm of one run.

    Returns:
        Verdicts: What :func:`~..reports.attacks.write_attack_report` reads.
    """
    arms = arms_or_runs(names, arms)
    base_run = None if baseline is None else arms[baseline][0]
    worst: Dict = {}
    summary = attack_summary(store, names, base_run, resamples, seed, epsilons,
                             audit, worst)
    by_arm = attack_arms(store, arms, summary, baseline, resamples, seed,
                         worst)
    cells = {n: store.data['models'][n]['cells'] for n in names}
    return record(
        store, Verdicts(summary, by_arm, arms, store.data['settings'], cells))
