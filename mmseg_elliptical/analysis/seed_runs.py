"""Training runs over seeds: their validation history and its statistics.

What ``tools/analysis_tools/compare_seeds.py`` (``make compare``) reads from
the runs it trains, for any tool that compares runs of mmseg's
``tools/train.py``: :func:`read_history` reads a work dir's validations from
the ``vis_data/scalars.json`` files that mmengine's ``LocalVisBackend``
writes, :func:`seed_statistics` gives the mean and standard deviation over
seeds of each model's final validation.
"""
import glob
import json
import math
import os.path as osp
import statistics
from typing import Dict, List, Optional, Sequence


def read_history(work_dir: str, metric: str = 'mIoU') -> Dict[int, Dict]:
    """Every validation logged under ``work_dir``, by iteration.

    Reads all ``*/vis_data/scalars.json`` (one per start of the run, so a
    resumed run has several), in time order: a later log of the same
    iteration replaces an earlier one.

    Args:
        work_dir (str): The run's work dir.
        metric (str): Key that marks a validation record.

    Returns:
        dict[int, dict]: ``{iteration: {metric name: value}}``.
    """
    history = {}
    for path in sorted(
            glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))):
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                if metric in record:
                    step = int(record.pop('step'))
                    history[step] = {
                        k: v
                        for k, v in record.items()
                        if k not in ('time', 'data_time')
                    }
    return history


def _mean_and_std(values: Sequence[float]) -> Dict[str, float]:
    """``statistics.mean`` and the sample ``statistics.stdev`` of ``values``,
    and their number ``n``; the deviation is NaN for one value or with a NaN
    among them (mmseg's IoU of a class absent from the validation images),
    where ``statistics.stdev`` fails."""
    finite = len(values) > 1 and all(map(math.isfinite, values))
    std = statistics.stdev(values) if finite else math.nan
    return dict(mean=statistics.mean(values), std=std, n=len(values))


def seed_statistics(
    runs: Sequence[Dict],
    metrics: Optional[Sequence[str]] = None
) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Mean and standard deviation over seeds of each final metric.

    Args:
        runs (Sequence[dict]): One per run: ``name`` (the model) and
            ``history`` (``{iteration: {metric: value}}``, as
            :func:`read_history` returns it; JSON's string keys too).
        metrics (Sequence[str], optional): Metrics to summarise; default
            ``mIoU`` and every ``IoU.<class>``, in the order of the first
            run's log.

    Returns:
        dict: ``{name: {metric: {'mean', 'std', 'n'}}}`` in run order, over
        the last validation of each run; a metric some run lacks is left
        out.
    """
    finals: Dict[str, List[Dict]] = {}
    for run in runs:
        history = run['history']
        finals.setdefault(run['name'],
                          []).append(history[max(history, key=int)])
    if metrics is None:
        first = next(iter(finals.values()))[0]
        metrics = ['mIoU'] + [k for k in first if k.startswith('IoU.')]
    return {
        name: {
            m: _mean_and_std([float(r[m]) for r in finals_])
            for m in metrics if all(m in r for r in finals_)
        }
        for name, finals_ in finals.items()
    }
