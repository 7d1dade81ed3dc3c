"""Arms: the runs (training seeds) of one model name, summarised and
compared (docs/evidence.md). Per arm, every headline number's mean over its
runs, sample sd and per-run values (:func:`figures`), and the hierarchical
paired test against the baseline arm
(:func:`~.bootstrap.hierarchical_bootstrap`). These read the per-run
summaries and the stored per-image areas and never re-run a model;
:mod:`.arms_report` renders them. The result is the store's top-level
``"arms"`` entry."""
import statistics
from functools import lru_cache
from typing import Callable, Dict, List, Optional, Sequence

from ..grid.store import CLEAN, ResultStore, cell_key
from ..statistics.bootstrap import hierarchical_bootstrap
from ..statistics.summary import attack_model_summary
from .layout import seed_in_path

#: The corruption grid's headline numbers (keys of a run's summary).
CORRUPTION_FIGURES = ('P', 'mPC', 'rPC', 'mCE', 'rmCE')


def figure(values: Sequence[Optional[float]]) -> Dict:
    """``mean``, sample ``sd`` (None below 2 runs), ``n`` and the per-run
    ``runs`` values; mean and sd are None when a run has no value."""
    values = list(values)
    known = values and None not in values
    return dict(
        mean=statistics.fmean(values) if known else None,
        sd=statistics.stdev(values) if known and len(values) > 1 else None,
        n=len(values),
        runs=values)


def figures(per_run: Sequence[Dict[str, Optional[float]]]) -> Dict:
    """:func:`figure` of every key of the runs' flat ``{key: value}``
    dicts (in the first run's order; a key a run lacks is None there)."""
    keys = list(dict.fromkeys(k for run in per_run for k in run))
    return {k: figure([run.get(k) for run in per_run]) for k in keys}


def corruption_numbers(summary: Dict) -> Dict[str, Optional[float]]:
    """A run's corruption headline numbers: P, mPC, rPC, mCE, rmCE."""
    return {k: summary.get(k) for k in CORRUPTION_FIGURES}


def attack_numbers(summary: Dict) -> Dict[str, Optional[float]]:
    """A run's attack headline numbers: ``clean``, ``SERIES/EPS``,
    ``worst/EPS``, ``mean/SERIES`` and ``worst_mean``."""
    out = dict(clean=summary.get('clean'))
    for series, values in summary.get('series', {}).items():
        out.update({f'{series}/{e}': v for e, v in values.items()})
        out[f'mean/{series}'] = summary['mean_over_eps'].get(series)
    out.update({
        f'worst/{e}': None if w is None else w['mIoU']
        for e, w in summary['worst'].items()
    })
    out['worst_mean'] = summary['mean_over_eps'].get('worst')
    return out


def paired_arms(cells: Dict[str, Callable], arm: List[str], base: List[str],
                notes: List[str], resamples: int, seed: int) -> Dict:
    """The hierarchical paired test of ``arm - base`` for each statistic.

    Args:
        cells (dict): ``{STATISTIC: areas(run)}``: a run's list of
            :class:`~.bootstrap.ImageAreas` (None where missing).
        arm (list[str]): The arm's runs.
        base (list[str]): The baseline arm's runs.
        notes (list[str]): Why a statistic has no test is added here.

    Returns:
        dict: ``{STATISTIC: result or None}``.
    """
    out = {}
    for what, areas in cells.items():
        a, b = [areas(r) for r in arm], [areas(r) for r in base]
        out[what] = None
        if any(x is None or None in x or not x for x in (*a, *b)):
            notes.append(f'No arm test on {what}: per-image areas are '
                         'missing for some run.')
            continue
        try:
            out[what] = hierarchical_bootstrap(a, b, resamples, seed)
        except ValueError as e:
            notes.append(f'No arm test on {what}: {e}')
    return out


def _arms(arms: Dict[str, List[str]], baseline: Optional[str],
          numbers: Dict[str, Dict], statistics_of: Callable, resamples: int,
          seed: int) -> Dict:
    out = {}
    for name, runs in arms.items():
        entry: Dict = dict(
            runs=list(runs),
            figures=figures([numbers[r] for r in runs]),
            paired=None,
            notes=[])
        if baseline is not None and name != baseline:
            entry['baseline'] = baseline
            entry['paired'] = paired_arms(statistics_of(), runs,
                                          arms[baseline], entry['notes'],
                                          resamples, seed)
        out[name] = entry
    return out


def corruption_arms(store: ResultStore,
                    arms: Dict[str, List[str]],
                    summary: Dict[str, Dict],
                    corruptions: Sequence[str],
                    severities: Sequence[int],
                    baseline: Optional[str] = None,
                    resamples: int = 1000,
                    seed: int = 0) -> Dict:
    """Every arm's figures and, but for the baseline arm's, its
    hierarchical paired test on ``clean`` and ``mPC`` mIoU: as
    :func:`attack_arms` (its arguments and result), ``summary`` holding
    each run's :func:`~.corruption_verdicts.grid_summary`.

    Args:
        corruptions (Sequence[str]): The corruptions of ``mPC``.
        severities (Sequence[int]): Their severities.
    """
    corrupted = [cell_key(c, s) for c in corruptions for s in severities]

    def tests() -> Dict[str, Callable]:
        return {
            what: lambda run, keys=keys: [store.areas(run, k) for k in keys]
            for what, keys in (('clean', [CLEAN]), ('mPC', corrupted))
        }

    numbers = {r: corruption_numbers(s) for r, s in summary.items()}
    return seeds_of(store, arms,
                    _arms(arms, baseline, numbers, tests, resamples, seed))


def attack_arms(store: ResultStore,
                arms: Dict[str, List[str]],
                summary: Dict[str, Dict],
                baseline: Optional[str] = None,
                resamples: int = 1000,
                seed: int = 0,
                worst_areas: Optional[Dict[str, Dict]] = None) -> Dict:
    """Every arm's figures and, but for the baseline arm's, its
    hierarchical paired test on ``clean``, ``worst/EPS`` and
    ``worst_mean`` mIoU (the worst case per image of each run, as
    :func:`~.summary.attack_model_summary` takes it).

    Args:
        store (ResultStore): The attack grid's store.
        arms (dict): ``{arm: [runs]}``.
        summary (dict): ``{run: summary}``
            (:func:`~.attack_verdicts.attack_summary`).
        baseline (str, optional): The baseline arm.
        resamples (int): The bootstrap's resamples.
        seed (int): Its seed.
        worst_areas (dict, optional): ``{run: {eps: ImageAreas}}``, the
            worst cases the per-run summary chose (default: chosen again
            over every eps of the store).

    Returns:
        dict: ``{arm: {runs, figures, paired, notes[, baseline]}}``.
    """
    read = lru_cache(maxsize=None)(store.areas)
    worst = lru_cache(maxsize=None)(
        lambda run: worst_areas[run] if worst_areas else attack_model_summary(
            store.data['models'][run]['cells'],
            lambda key: read(run, key),
            labelled=lambda key: store.labelled(run, key))['worst_areas'])

    def tests() -> Dict[str, Callable]:
        runs = [r for rs in arms.values() for r in rs]
        epsilons = sorted({e for r in runs for e in worst(r)}, key=float)
        out = dict(clean=lambda run: [read(run, CLEAN)])
        for e in epsilons:
            out[f'worst/{e}'] = lambda run, e=e: [worst(run).get(e)]
        out['worst_mean'] = lambda run: [worst(run).get(e) for e in epsilons]
        return out

    numbers = {r: attack_numbers(s) for r, s in summary.items()}
    return seeds_of(store, arms,
                    _arms(arms, baseline, numbers, tests, resamples, seed))


def seeds_of(store: ResultStore, arms: Dict[str, List[str]],
             by_arm: Dict[str, Dict]) -> Dict[str, Dict]:
    """Add ``seeds`` (``{run: seed}``, where a run's checkpoint path names
    its training seed, :func:`.layout.seed_in_path`) to each arm of
    ``by_arm``; return it."""
    for arm, runs in arms.items():
        found = {}
        for run in runs:
            path = store.data['models'].get(run, {}).get('checkpoint') or ''
            seed = seed_in_path(path)
            if seed is not None:
                found[run] = seed
        by_arm[arm]['seeds'] = found
    return by_arm


def collapse_numbers(result: Dict) -> Dict[str, Optional[float]]:
    """A run's collapse per layer (:func:`~..collapse.measure_collapse`):
    ``cosine/L`` and, in elliptical layers, ``m spread/L``."""
    out = {f'cosine/{i}': v for i, v in enumerate(result['cosine'])}
    out.update({
        f'm spread/{i}': v
        for i, v in enumerate(result.get('relevance_spread', []))
        if v is not None
    })
    return out


def collapse_arms(arms: Dict[str, List[str]], results: Dict[str,
                                                            Dict]) -> Dict:
    """Every arm's collapse figures per layer (no paired test: collapse
    has no per-image areas)."""
    numbers = {r: collapse_numbers(x) for r, x in results.items()}
    return _arms(arms, None, numbers, dict, 0, 0)
