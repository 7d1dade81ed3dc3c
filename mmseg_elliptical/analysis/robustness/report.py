"""The robustness report: summary, per-cell table, CSV and heatmaps."""
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ...utils.output import markdown_table, pyplot, write_report
from .store import CLEAN, ResultStore, cell_key


def summarise(cells: Dict[str, Dict], corruptions: Sequence[str],
              severities: Sequence[int], metric: str) -> Dict:
    """Clean score, per-corruption means, the grid mean and relative drop.

    Args:
        cells (dict): ``{cell_key: metrics}`` of one model.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): Metric name, e.g. ``'mIoU'``.

    Returns:
        dict: ``clean``, ``grid`` (``{corruption: [score per severity]}``),
        ``per_corruption`` (mean over severities), ``mean`` (mean over the
        whole grid) and ``drop`` (``(clean - mean) / clean``); missing cells
        are None and leave the means None.
    """

    def score(key: str) -> Optional[float]:
        found = cells.get(key)
        return None if found is None else found.get(metric)

    def mean(values: Iterable[Optional[float]]) -> Optional[float]:
        values = list(values)
        if not values or any(v is None for v in values):
            return None
        return sum(values) / len(values)

    grid = {
        c: [score(cell_key(c, s)) for s in severities]
        for c in corruptions
    }
    per_corruption = {c: mean(grid[c]) for c in corruptions}
    clean = score(CLEAN)
    total = mean(per_corruption.values())
    drop = None if clean in (None, 0) or total is None else \
        (clean - total) / clean
    return dict(
        clean=clean,
        grid=grid,
        per_corruption=per_corruption,
        mean=total,
        drop=drop)


def _pct(value: Optional[float]) -> Optional[str]:
    return None if value is None else f'{100 * value:.1f}%'


def markdown_tables(summaries: Dict[str, Dict], corruptions: Sequence[str],
                    severities: Sequence[int], metric: str) -> str:
    """A summary table and a per-cell table, models side by side.

    Args:
        summaries (dict): ``{model: summarise(...)}``.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.
        metric (str): Metric name.

    Returns:
        str: Markdown.
    """
    names = list(summaries)
    summary = markdown_table([
        'model', f'clean {metric}', f'mean corrupted {metric}', 'relative drop'
    ], [[n, s['clean'], s['mean'], _pct(s['drop'])]
        for n, s in summaries.items()],
                             spec='.2f')
    rows = []
    for c in corruptions:
        for i, sev in enumerate(severities):
            rows.append([c, sev] + [summaries[n]['grid'][c][i] for n in names])
        rows.append([c, 'mean'] +
                    [summaries[n]['per_corruption'][c] for n in names])
    cells = markdown_table(['corruption', 'severity', *names],
                           rows,
                           spec='.2f',
                           left=2)
    return f'{summary}\n{cells}'


def csv_rows(summaries: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int],
             metric: str) -> Tuple[List[str], List[List]]:
    """Long-format rows: model, corruption, severity, score, relative drop.

    Returns:
        tuple[list[str], list[list]]: Header and rows (clean first).
    """
    header = ['model', 'corruption', 'severity', metric, 'relative_drop']
    rows = []
    for name, s in summaries.items():
        rows.append([name, CLEAN, 0, s['clean'], 0.0])
        for c in corruptions:
            for i, sev in enumerate(severities):
                v = s['grid'][c][i]
                drop = None if v is None or not s['clean'] else \
                    (s['clean'] - v) / s['clean']
                rows.append([name, c, sev, v, drop])
    return header, rows


def heatmaps(summaries: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int], metric: str):
    """One heatmap (corruption x severity, plus the mean) per model.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    import numpy as np
    plt = pyplot()
    grids = {}
    for name, s in summaries.items():
        grids[name] = np.array(
            [[np.nan if v is None else v for v in s['grid'][c]] + [
                np.nan
                if s['per_corruption'][c] is None else s['per_corruption'][c]
            ] for c in corruptions],
            dtype=float)
    values = np.concatenate([g.ravel() for g in grids.values()])
    values = values[~np.isnan(values)]
    vmin, vmax = (values.min(), values.max()) if values.size else (0, 1)
    cols = [str(s) for s in severities] + ['mean']
    fig, axes = plt.subplots(
        1,
        len(grids),
        squeeze=False,
        sharey=True,
        figsize=(1.2 + 0.55 * len(cols) * len(grids) + 0.9 * len(grids),
                 1.0 + 0.32 * len(corruptions)))
    for ax, (name, grid) in zip(axes[0], grids.items()):
        im = ax.imshow(
            grid, cmap='viridis', vmin=vmin, vmax=vmax, aspect='auto')
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(
                    j,
                    i,
                    f'{v:.1f}',
                    ha='center',
                    va='center',
                    fontsize=7,
                    color='w' if v < (vmin + vmax) / 2 else 'k')
        clean = summaries[name]['clean']
        ax.set_title(
            f'{name}\nclean {metric} '
            f'{"-" if clean is None else f"{clean:.1f}"}',
            fontsize=8)
        ax.set_xticks(range(len(cols)), cols, fontsize=7)
        ax.set_xlabel('severity', fontsize=7)
    axes[0][0].set_yticks(range(len(corruptions)), corruptions, fontsize=7)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=metric)
    return fig


def write_robustness_report(store: ResultStore, names: Sequence[str],
                            corruptions: Sequence[str],
                            severities: Sequence[int], metric: str,
                            work_dir: str) -> str:
    """Write ``robustness.{md,csv,png}`` (the JSON is the store's).

    Returns:
        str: The markdown.
    """
    summaries = {
        n:
        summarise(store.data['models'][n]['cells'], corruptions, severities,
                  metric)
        for n in names
    }
    text = markdown_tables(summaries, corruptions, severities, metric)
    write_report(
        work_dir,
        'robustness',
        markdown=text,
        table=csv_rows(summaries, corruptions, severities, metric),
        figure=heatmaps(summaries, corruptions, severities, metric))
    return text
