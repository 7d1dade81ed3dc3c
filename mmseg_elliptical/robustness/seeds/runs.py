"""Training runs over seeds: their validation history (mmengine's
``vis_data/scalars.json``), its statistics, their table and figure."""
import glob
import json
import math
import os.path as osp
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from ...utils.output import markdown_table, pyplot, write_report


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


def markdown(summary: Dict[str, Dict], results: Sequence[Dict]) -> str:
    """The summary as a markdown table, one row per model.

    Cells are ``mean ± std`` over the seeds; the last column is the mean
    wall-clock time of a run.
    """
    metrics = list(next(iter(summary.values())))
    head = (['model', 'seeds'] + [m.replace('IoU.', '')
                                  for m in metrics] + ['min/run'])
    rows = []
    for name, stats in summary.items():
        seconds = [
            r['seconds'] for r in results
            if r['name'] == name and r.get('seconds')
        ]
        minutes = statistics.mean(seconds) / 60 if seconds else None
        cells = [f'{s["mean"]:.2f} ± {s["std"]:.2f}' for s in stats.values()]
        n = next(iter(stats.values()))['n']
        rows.append([name, n] + cells + [minutes])
    return markdown_table(head, rows, spec='.1f')


def figure(results: Sequence[Dict], metric: str = 'mIoU'):
    """Validation ``metric`` over iterations: every seed, and the mean.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    names = list(dict.fromkeys(r['name'] for r in results))
    for colour, name in zip(plt.rcParams['axes.prop_cycle'].by_key()['color'],
                            names):
        runs = [r['history'] for r in results if r['name'] == name]
        for history in runs:
            steps = sorted(history, key=int)
            ax.plot([int(s) for s in steps],
                    [history[s][metric] for s in steps],
                    color=colour,
                    alpha=0.35,
                    linewidth=1)
        common = sorted(set.intersection(*(set(h) for h in runs)), key=int)
        ax.plot([int(s) for s in common],
                [statistics.mean(h[s][metric] for h in runs) for s in common],
                color=colour,
                linewidth=2,
                marker='o',
                label=f'{name} (mean of {len(runs)})')
    ax.set_xlabel('iteration')
    ax.set_ylabel(f'validation {metric}')
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def write_compare(work_dir: str, results: Sequence[Dict],
                  command: Dict) -> Tuple[Dict, str, List[str]]:
    """Write ``compare.json`` (the summary, the runs and ``command``),
    ``compare.md`` and ``compare.png`` in ``work_dir``.

    Returns:
        tuple: The summary (:func:`seed_statistics`), its :func:`markdown`
        table and the files written.
    """
    summary = seed_statistics(results)
    table = markdown(summary, results)
    written = write_report(
        work_dir,
        'compare',
        data=dict(summary=summary, runs=results, command=command),
        markdown=table,
        figure=figure(results))
    return summary, table, written
