"""``robustness.png``: mIoU per corruption and severity, and the
corruption errors, per model."""
from typing import Dict, Optional, Sequence

import numpy as np

from ...utils.output import pyplot, wrap_label


def heatmaps(summary: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int]):
    """One heatmap (corruption x severity, plus the mean) per model, and the
    corruption error of each corruption against the baseline.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    plt = pyplot()
    metric = next(iter(summary.values()))['metric']
    grids = {}
    for name, s in summary.items():
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
    with_ce = any(v is not None for s in summary.values()
                  for v in s['CE'].values())
    panels = len(grids) + with_ce
    side = 0.3 + 0.55 * len(cols)  # inches of one heatmap
    titles = {n: wrap_label(n, int(14 * side)) for n in summary}
    labels = {n: wrap_label(n, 40) for n in summary}
    one_column = max(len(n) for n in summary) > 30
    legend_lines = [label.count('\n') + 1 for label in labels.values()]
    text_lines = 2 + max(t.count('\n') for t in titles.values()) + with_ce * (
        sum(legend_lines) if one_column else max(legend_lines))
    fig, axes = plt.subplots(
        1,
        panels,
        squeeze=False,
        layout='constrained',
        width_ratios=[side] * len(grids) + [2.4] * with_ce,
        figsize=(1.6 + side * len(grids) + 0.8 + 3.4 * with_ce,
                 1.2 + 0.32 * len(corruptions) + 0.15 * text_lines))
    for k, (ax, (name, grid)) in enumerate(zip(axes[0], grids.items())):
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
        s = summary[name]
        title = [titles[name], f'P {_fmt(s["P"])}, mPC {_fmt(s["mPC"])}']
        if s['baseline']:
            title[-1] += f', mCE {_fmt(s["mCE"], ".3f")}'
        ax.set_title('\n'.join(title), fontsize=8)
        ax.set_xticks(range(len(cols)), cols, fontsize=7)
        ax.set_xlabel('severity', fontsize=7)
        ax.set_yticks(
            range(len(corruptions)), corruptions if k == 0 else [], fontsize=7)
    fig.colorbar(
        im, ax=axes[0][:len(grids)].tolist(), shrink=0.8, label=metric)
    if with_ce:
        ax = axes[0][-1]
        height = 0.8 / len(summary)
        shown = [1.0]
        for k, (name, s) in enumerate(summary.items()):
            ce = [
                np.nan if s['CE'][c] is None else s['CE'][c]
                for c in corruptions
            ]
            shown += [v for v in ce if not np.isnan(v)]
            ax.barh(
                np.arange(len(corruptions)) - 0.4 + (k + 0.5) * height,
                ce,
                height=height,
                label=labels[name])
        ax.axvline(1, color='0.4', lw=0.8, ls=':')
        ax.set_xlim(0, 1.08 * max(shown))  # a ratio: bars start at 0
        ax.set_yticks(range(len(corruptions)), corruptions, fontsize=7)
        ax.tick_params(axis='x', labelsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(
            f'CE (error / the baseline\'s; dotted: 1)\nbaseline: '
            f'{wrap_label(s["baseline"], 40)}',
            fontsize=7)
        ax.set_title('corruption error', fontsize=8)
        fig.legend(
            *ax.get_legend_handles_labels(),
            loc='outside lower center',
            ncols=1 if one_column else len(summary),
            fontsize=7,
            title='corruption error bars',
            title_fontsize=7)
    return fig


def _fmt(value: Optional[float], spec: str = '.1f') -> str:
    return '-' if value is None else format(value, spec)
