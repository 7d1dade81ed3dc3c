"""The verdicts of a store, computed once: what the reports read."""
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

from ..grid.store import ResultStore
from ..seeds.means import arm_means, several


@dataclass
class Verdicts:
    """Every number a report of one threat shows, computed from a store's
    cells once (:func:`~.corruptions.corruption_verdicts`,
    :func:`~.attacks.attack_verdicts`); the report, its CSV and its figures
    read it and compute nothing.

    Attributes:
        summary (dict): ``{run: summary}`` (with the paired tests).
        arms (dict): ``{arm: {runs, figures, paired, notes}}``.
        runs (dict): ``{arm: [runs]}``.
        settings (dict): What the report names: the grid's settings, and
            the corruptions and severities of a corruption grid.
        cells (dict): ``{run: {cell: numbers}}``, the stored cells.
        means (dict): ``{arm label: mean summary}`` of the arms
            (:func:`~.arm_means.arm_means`) when an arm has two or more
            runs, else empty: the figures draw these.
    """
    summary: Dict[str, Dict]
    arms: Dict[str, Dict]
    runs: Dict[str, List[str]]
    settings: Dict = field(default_factory=dict)
    cells: Dict[str, Dict] = field(default_factory=dict)
    means: Dict[str, Dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if several(self.runs) and not self.means:
            self.means = arm_means(self.summary, self.runs)


def record(store: ResultStore, verdicts: Verdicts) -> Verdicts:
    """Keep ``verdicts``' summary and arms in the store's JSON (saved)."""
    store.data['summary'] = verdicts.summary
    store.data['arms'] = verdicts.arms
    store.save()
    return verdicts


def arms_or_runs(names: Sequence[str],
                 arms: Dict[str, List[str]] = None) -> Dict[str, List[str]]:
    """``arms``, or each run an arm of its own."""
    return arms or {n: [n] for n in names}
