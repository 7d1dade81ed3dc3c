"""Training runs over seeds: their validation history (mmengine's
``vis_data/scalars.json``) and its statistics."""
import glob
import json
import math
import os.path as osp
import statistics
from typing import Dict, List, Optional, Sequence


def read_history(work_dir: str, metric: str = 'mIoU') -> Dict[int, Dict]:
    """Every validation logged under ``work_dir``, ``{iteration: {metric:
    value}}``; of a resumed run's logs, the later one wins.

    Args:
        work_dir (str): The run's work dir.
        metric (str): Key that marks a validation record.
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
    """Mean, sample deviation and ``n``; the deviation is NaN for one value
    or a NaN among them (an IoU of a class absent from the images)."""
    finite = len(values) > 1 and all(map(math.isfinite, values))
    std = statistics.stdev(values) if finite else math.nan
    return dict(mean=statistics.mean(values), std=std, n=len(values))


def seed_statistics(
    runs: Sequence[Dict],
    metrics: Optional[Sequence[str]] = None
) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Mean and standard deviation over seeds of each final metric.

    Args:
        runs (Sequence[dict]): ``name`` and ``history`` (as
            :func:`read_history` returns it) of each run.
        metrics (Sequence[str], optional): Default ``mIoU`` and every
            ``IoU.<class>``.

    Returns:
        dict: ``{name: {metric: {'mean', 'std', 'n'}}}`` over the last
        validation of each run; a metric some run lacks is left out.
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
