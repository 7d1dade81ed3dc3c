"""The certification grid's numbers per run (certified mIoU, aAcc and
abstain rate per noise level, radius and correction) and the arms' verdict:
the hierarchical paired bootstrap over seeds and images
(:func:`~.arms.paired_arms`) on the clean mIoU and each cell's certified
mIoU (an abstaining pixel counts as wrong)."""
from typing import Dict, List, Optional, Sequence

from ..grid.store import CLEAN, ResultStore
from ..seeds.arms import _arms, seeds_of
from .cells import Certification


def certify_rows(store: ResultStore, run: str,
                 cells: Sequence[Certification]) -> List[Dict]:
    """A run's finished cells: ``sigma``, ``tau``, ``correction``,
    ``radius``, ``mIoU``, ``aAcc`` and ``abstain`` (None where missing)."""
    rows = []
    for cell in cells:
        got = store.get(run, cell.key) or {}
        rows.append(
            dict(
                key=cell.key,
                sigma=cell.sigma,
                tau=cell.tau,
                correction=cell.correction,
                radius=cell.radius,
                **{k: got.get(k)
                   for k in ('mIoU', 'aAcc', 'abstain')}))
    return rows


def certify_numbers(store: ResultStore, run: str,
                    cells: Sequence[Certification]) -> Dict:
    """A run's headline numbers: ``clean`` and each cell's certified mIoU
    and abstain rate (``KEY``, ``abstain/KEY``)."""
    out = dict(clean=(store.get(run, CLEAN) or {}).get('mIoU'))
    for row in certify_rows(store, run, cells):
        out[row['key']] = row['mIoU']
        out[f'abstain/{row["key"]}'] = row['abstain']
    return out


def certify_verdicts(store: ResultStore,
                     runs: Sequence[str],
                     cells: Sequence[Certification],
                     arms: Dict[str, List[str]],
                     baseline: Optional[str] = None,
                     resamples: int = 1000,
                     seed: int = 0) -> Dict:
    """Every run's rows and numbers, and the arms' figures and verdicts.

    Args:
        store (ResultStore): The grid's store.
        runs (Sequence[str]): The runs (model names), in order.
        cells (Sequence[Certification]): The certification cells.
        arms (dict): ``{arm: [runs]}`` (one run each without seeds).
        baseline (str, optional): The baseline arm.
        resamples (int): The bootstrap's resamples.
        seed (int): Its seed.

    Returns:
        dict: ``runs`` (``{run: {clean, rows}}``) and ``arms``
        (:func:`~.arms._arms`' result, with ``seeds``).
    """
    keys = [CLEAN] + [c.key for c in cells]

    def tests() -> Dict:
        return {
            key: lambda run, key=key: [store.areas(run, key)]
            for key in keys
        }

    numbers = {r: certify_numbers(store, r, cells) for r in runs}
    return dict(
        runs={
            r: dict(
                clean=numbers[r]['clean'], rows=certify_rows(store, r, cells))
            for r in runs
        },
        arms=seeds_of(store, arms,
                      _arms(arms, baseline, numbers, tests, resamples, seed)))
