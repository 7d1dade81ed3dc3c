"""What a figure draws for an arm of several runs: the mean of the runs'
summaries (numbers averaged leaf by leaf) under the arm's name."""
import statistics
from typing import Any, Dict, List, Optional, Sequence


def mean_tree(trees: Sequence[Any]) -> Any:
    """The leaf-by-leaf mean of equally shaped summaries: numbers averaged
    (None if a run has none), dicts by key and lists by position; any other
    leaf (text, flags) is the first run's."""
    first = trees[0]
    if isinstance(first, dict):
        return {
            k:
            mean_tree(
                [t.get(k) if isinstance(t, dict) else None for t in trees])
            for k in first
        }
    if isinstance(first, (list, tuple)) and all(
            isinstance(t, (list, tuple)) and len(t) == len(first)
            for t in trees):
        return [mean_tree(list(values)) for values in zip(*trees)]
    numbers = [
        isinstance(t, (int, float)) and not isinstance(t, bool) for t in trees
    ]
    if any(numbers):
        return statistics.fmean(trees) if all(numbers) else None
    return first


def arm_label(arm: str, runs: Sequence[str]) -> str:
    """``ARM (mean of N runs)``, or the run's own name for one run."""
    return runs[0] if len(runs) == 1 else f'{arm} (mean of {len(runs)} runs)'


def several(arms: Optional[Dict[str, List[str]]]) -> bool:
    """Whether an arm has two or more runs."""
    return bool(arms) and any(len(r) > 1 for r in arms.values())


def arm_means(per_run: Dict[str, Any],
              arms: Dict[str, List[str]]) -> Dict[str, Any]:
    """``{arm label: mean_tree of its runs' entries}`` in the arms' order."""
    return {
        arm_label(arm, runs): mean_tree([per_run[r] for r in runs])
        for arm, runs in arms.items()
    }
