"""The robustness report: the field's summary, the paired test, the cells.

:func:`grid_summary` computes every model's :mod:`.summary` numbers and the
paired bootstrap of each model against the baseline (:mod:`.bootstrap`, from
the per-image areas in the store); :func:`write_robustness_report` adds them
to ``robustness.json`` and writes ``robustness.{md,csv,png}`` and
``robustness_summary.csv``.
"""
from typing import Dict, List, Optional, Sequence, Tuple

from ...utils.output import markdown_table, pyplot, write_report
from .bootstrap import paired_bootstrap
from .protocols import GROUPS
from .store import CLEAN, ResultStore, cell_key
from .summary import robustness_summary


def paired_test(store: ResultStore, name: str, baseline: str,
                corruptions: Sequence[str], severities: Sequence[int],
                resamples: int, seed: int) -> Dict:
    """The paired bootstrap of ``name - baseline`` in mIoU, on the clean
    cell and on mPC (every corrupted cell), from the stored areas.

    Returns:
        dict: ``baseline``, ``metric`` and, for ``clean`` and ``mPC``, the
        :func:`~.bootstrap.paired_bootstrap` result or None with a ``note``.
    """
    out: Dict = dict(baseline=baseline, metric='mIoU', notes=[])
    corrupted = [cell_key(c, s) for c in corruptions for s in severities]
    for what, keys in (('clean', [CLEAN]), ('mPC', corrupted)):
        pairs = [(store.areas(name, k), store.areas(baseline, k))
                 for k in keys]
        missing = [k for k, p in zip(keys, pairs) if None in p]
        if not keys or missing:
            out[what] = None
            out['notes'].append(
                f'No paired test on {what}: the per-image areas of '
                f'{", ".join(missing) or "any cell"} are missing (the '
                'evaluator is not mmseg\'s IoUMetric, or the cells were '
                'measured before they were kept).')
            continue
        try:
            out[what] = paired_bootstrap([a for a, _ in pairs],
                                         [b for _, b in pairs], resamples,
                                         seed)
        except ValueError as e:  # e.g. a single image
            out[what] = None
            out['notes'].append(f'No paired test on {what}: {e}')
    return out


def grid_summary(store: ResultStore,
                 names: Sequence[str],
                 corruptions: Sequence[str],
                 severities: Sequence[int],
                 metric: str = 'mIoU',
                 baseline: Optional[str] = None,
                 means: Sequence[str] = (),
                 resamples: int = 1000,
                 seed: int = 0) -> Dict[str, Dict]:
    """Every model's summary (:func:`~.summary.robustness_summary`) and,
    but for the baseline's, its ``paired`` test against the baseline.

    Returns:
        dict: ``{model: summary}`` (the ``summary`` of ``robustness.json``).
    """
    cells = {n: store.data['models'][n]['cells'] for n in names}
    summary = robustness_summary(cells, corruptions, severities, metric,
                                 baseline, means)
    for name in names:
        summary[name]['paired'] = None if baseline in (None, name) else \
            paired_test(store, name, baseline, corruptions, severities,
                        resamples, seed)
    return summary


def _pct(value: Optional[float]) -> Optional[str]:
    return None if value is None else f'{100 * value:.1f}%'


def paired_lines(summary: Dict[str, Dict]) -> List[str]:
    """One line per paired test: the difference, its interval, the verdict.
    """
    lines = []
    for name, s in summary.items():
        paired = s.get('paired')
        if not paired:
            continue
        for what in ('clean', 'mPC'):
            r = paired[what]
            if r is None:
                continue
            lines.append(
                f'- {name} - {paired["baseline"]}, {what} mIoU: '
                f'{r["difference"]:+.2f} (95 % interval {r["low"]:+.2f} to '
                f'{r["high"]:+.2f}; {verdict(r)}). Paired bootstrap over '
                f'{r["images"]} images, {r["resamples"]} resamples, seed '
                f'{r["seed"]}.')
        lines += [f'- {n}' for n in paired['notes']]
    return lines


def grid_markdown(summary: Dict[str, Dict], corruptions: Sequence[str],
                  severities: Sequence[int]) -> str:
    """The summary, the groups, CE per corruption, the paired tests and
    every cell, models side by side.

    Args:
        summary (dict): :func:`grid_summary`'s result.
        corruptions (Sequence[str]): Grid rows.
        severities (Sequence[int]): Grid columns.

    Returns:
        str: Markdown.
    """
    names = list(summary)
    first = summary[names[0]]
    metric, baseline = first['metric'], first['baseline']
    against = f' (against {baseline})' if baseline else ''
    text = [
        markdown_table(
            ['model', f'P ({metric})', 'mPC', 'rPC', f'mCE{against}', 'rmCE'],
            [[n, s['P'], s['mPC'],
              _pct(s['rPC']), s['mCE'], s['rmCE']]
             for n, s in summary.items()],
            spec='.2f')
    ]
    groups = [g for g in GROUPS if g in first['groups']]
    if groups:
        text.append(
            markdown_table(
                ['group', 'corruptions'] +
                [f'{n} {k}' for n in names for k in ('mPC', 'mCE')],
                [[g, len(first['groups'][g]['corruptions'])] + [
                    summary[n]['groups'][g][k] for n in names
                    for k in ('mPC', 'mCE')
                ] for g in groups],
                spec='.2f',
                left=2))
    text.append(
        markdown_table(
            ['corruption'] +
            [f'{n} {k}' for n in names for k in ('CE', 'rCE')],
            [[c] + [summary[n][k][c] for n in names for k in ('CE', 'rCE')]
             for c in corruptions],
            spec='.3f'))
    averaged = list(first['means'])
    if averaged:
        text.append(
            markdown_table(
                ['metric'] + [
                    f'{n} {k}' for n in names
                    for k in ('clean', 'corrupted mean')
                ], [[m] + [
                    summary[n]['means'][m][k] for n in names
                    for k in ('clean', 'corrupted')
                ] for m in averaged],
                spec='.2f'))
    lines = paired_lines(summary)
    notes = sorted({note for s in summary.values() for note in s['notes']})
    if lines or notes:
        text.append('\n'.join(lines + [f'- {n}' for n in notes]) + '\n')
    rows = []
    for c in corruptions:
        for i, sev in enumerate(severities):
            rows.append([c, sev] + [summary[n]['grid'][c][i] for n in names])
        rows.append([c, 'mean'] +
                    [summary[n]['per_corruption'][c] for n in names])
    text.append(
        markdown_table(['corruption', 'severity', *names],
                       rows,
                       spec='.2f',
                       left=2))
    return '\n'.join(text)


def csv_rows(summary: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int]) -> Tuple[List[str], List[List]]:
    """Long-format rows: model, corruption, severity, score, relative drop.

    Returns:
        tuple[list[str], list[list]]: Header and rows (clean first).
    """
    metric = next(iter(summary.values()))['metric']
    header = ['model', 'corruption', 'severity', metric, 'relative_drop']
    rows = []
    for name, s in summary.items():
        rows.append([name, CLEAN, 0, s['P'], 0.0])
        for c in corruptions:
            for i, sev in enumerate(severities):
                v = s['grid'][c][i]
                drop = None if v is None or not s['P'] else \
                    (s['P'] - v) / s['P']
                rows.append([name, c, sev, v, drop])
    return header, rows


def summary_rows(summary: Dict[str, Dict],
                 corruptions: Sequence[str]) -> Tuple[List[str], List[List]]:
    """One row per model: P, mPC, rPC, mCE, rmCE, the groups' mPC and mCE,
    CE per corruption and the paired differences with their intervals."""
    groups = [g for g in GROUPS if g in next(iter(summary.values()))['groups']]
    header = ['model', 'baseline', 'P', 'mPC', 'rPC', 'mCE', 'rmCE']
    header += [f'{g}_{k}' for g in groups for k in ('mPC', 'mCE')]
    header += [f'CE_{c}' for c in corruptions]
    header += [
        f'{w}_{k}' for w in ('clean', 'mPC')
        for k in ('difference', 'low', 'high')
    ]
    rows = []
    for name, s in summary.items():
        row = [name, s['baseline']
               ] + [s[k] for k in ('P', 'mPC', 'rPC', 'mCE', 'rmCE')]
        row += [s['groups'][g][k] for g in groups for k in ('mPC', 'mCE')]
        row += [s['CE'][c] for c in corruptions]
        paired = s.get('paired') or {}
        for what in ('clean', 'mPC'):
            r = paired.get(what) or {}
            row += [r.get(k) for k in ('difference', 'low', 'high')]
        rows.append(row)
    return header, rows


def heatmaps(summary: Dict[str, Dict], corruptions: Sequence[str],
             severities: Sequence[int]):
    """One heatmap (corruption x severity, plus the mean) per model, and the
    corruption error of each corruption against the baseline.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    import numpy as np
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
    fig, axes = plt.subplots(
        1,
        panels,
        squeeze=False,
        figsize=(1.2 + 0.55 * len(cols) * len(grids) + 0.9 * panels +
                 2.2 * with_ce, 1.4 + 0.32 * len(corruptions)))
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
        title = [f'{name}', f'P {_fmt(s["P"])}, mPC {_fmt(s["mPC"])}']
        if s['baseline']:
            title.append(f'mCE {_fmt(s["mCE"], ".3f")}')
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
                label=name)
        ax.axvline(1, color='0.4', lw=0.8, ls=':')
        span = max(max(shown) - min(shown), 0.02)
        ax.set_xlim(min(shown) - 0.3 * span, max(shown) + 0.3 * span)
        ax.set_yticks(range(len(corruptions)), corruptions, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f'CE (error / {s["baseline"]}\'s)', fontsize=7)
        ax.set_title('corruption error', fontsize=8)
        ax.legend(fontsize=6)
    return fig


def _fmt(value: Optional[float], spec: str = '.1f') -> str:
    return '-' if value is None else format(value, spec)


def write_robustness_report(store: ResultStore,
                            names: Sequence[str],
                            corruptions: Sequence[str],
                            severities: Sequence[int],
                            metric: str,
                            work_dir: str,
                            baseline: Optional[str] = None,
                            means: Sequence[str] = (),
                            resamples: int = 1000,
                            seed: int = 0) -> str:
    """Add the summary to ``robustness.json`` and write
    ``robustness.{md,csv,png}`` and ``robustness_summary.csv``.

    Returns:
        str: The markdown.
    """
    summary = grid_summary(store, names, corruptions, severities, metric,
                           baseline, means, resamples, seed)
    store.data['summary'] = summary
    store.save()
    text = grid_markdown(summary, corruptions, severities)
    write_report(
        work_dir,
        'robustness',
        markdown=text,
        table=csv_rows(summary, corruptions, severities),
        figure=heatmaps(summary, corruptions, severities))
    write_report(
        work_dir,
        'robustness_summary',
        table=summary_rows(summary, corruptions))
    return text


#: Fewer images than this give a bootstrap interval but no verdict.
MIN_VERDICT_IMAGES = 30


def verdict(result: Dict) -> str:
    """The words of a paired bootstrap's result."""
    if result['images'] < MIN_VERDICT_IMAGES:
        return (f'no verdict: {result["images"]} images are too few for a '
                f'reliable interval (at least {MIN_VERDICT_IMAGES})')
    return ('0 inside: no evidence of a difference'
            if result['zero_inside'] else '0 outside: a real difference')
