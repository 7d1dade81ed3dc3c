"""The robustness report: the field's summary, the paired test, the cells.

:func:`grid_summary` computes every model's :mod:`.summary` numbers and the
paired bootstrap of each model against the baseline (:mod:`.bootstrap`, from
the per-image areas in the store); :func:`write_robustness_report` adds them
to ``robustness.json`` and writes ``robustness.{md,csv,png}`` and
``robustness_summary.csv``.
"""
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

from ...utils.output import markdown_table, pyplot, wrap_label, write_report
from .attacks import ATTACKS
from .bootstrap import paired_bootstrap
from .protocols import GROUPS
from .store import CLEAN, ResultStore, cell_key
from .summary import attack_model_summary, robustness_summary


def bootstrap_or_note(
        a: List,
        b: List,
        what: str,
        notes: List[str],
        resamples: int,
        seed: int,
        missing: str = 'per-image areas are missing.') -> Optional[Dict]:
    """:func:`~.bootstrap.paired_bootstrap` of ``a - b``, or None with the
    note ``No paired test on WHAT: ...`` added to ``notes``: ``missing``
    when no cell is given or an area is None, else why the bootstrap
    refused (e.g. a single image)."""
    if not a or any(x is None for x in (*a, *b)):
        notes.append(f'No paired test on {what}: {missing}')
        return None
    try:
        return paired_bootstrap(a, b, resamples, seed)
    except ValueError as e:
        notes.append(f'No paired test on {what}: {e}')
        return None


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
        out[what] = bootstrap_or_note(
            [a for a, _ in pairs], [b for _, b in pairs],
            what,
            out['notes'],
            resamples,
            seed,
            missing=f'the per-image areas of '
            f'{", ".join(missing) or "any cell"} are missing (the evaluator '
            'is not mmseg\'s IoUMetric, or the cells were measured before '
            'they were kept).')
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


def interval(result: Dict, unit: str = '') -> str:
    """``DIFFERENCE[ UNIT] (95 % interval LOW to HIGH; VERDICT)`` of a
    :func:`~.bootstrap.paired_bootstrap` result."""
    return (f'{result["difference"]:+.2f}{unit} (95 % interval '
            f'{result["low"]:+.2f} to {result["high"]:+.2f}; '
            f'{result["verdict"]})')


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
                f'{interval(r)}. Paired bootstrap over {r["images"]} images, '
                f'{r["resamples"]} resamples, seed {r["seed"]}.')
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


def baseline_key(store: ResultStore, baseline: str, key: str) -> str:
    """The baseline's cell that ``key`` is compared with: the same, or the
    plain attack where the baseline has no adaptive one (no ``m``)."""
    if store.get(baseline, key) is None and '-adaptive/' in key:
        return key.replace('-adaptive/', '/', 1)
    return key


def attack_summary(store: ResultStore,
                   names: Sequence[str],
                   baseline: Optional[str] = None,
                   resamples: int = 1000,
                   seed: int = 0) -> Dict[str, Dict]:
    """Every model's :func:`~.summary.attack_model_summary` and, but for the
    baseline's, ``paired``: the paired bootstrap of ``model - baseline`` in
    mIoU of each series and of the worst case at each eps, and of the worst
    case's mean over eps.

    Returns:
        dict: ``{model: summary}`` (the ``summary`` of ``adversarial.json``).
    """
    read = lru_cache(maxsize=None)(store.areas)  # each file read once
    out = {}
    for name in names:
        out[name] = attack_model_summary(
            store.data['models'][name]['cells'],
            lambda key, n=name: read(n, key))
        out[name]['baseline'] = baseline
    for name in names:
        s = out[name]
        s['paired'] = None
        if baseline in (None, name):
            continue
        base = out[baseline]
        paired: Dict = dict(series={}, worst={}, notes=[])

        def test(a: list, b: list, what: str) -> Optional[Dict]:
            return bootstrap_or_note(a, b, what, paired['notes'], resamples,
                                     seed)

        for series, eps in s['series_keys'].items():
            paired['series'][series] = {}
            for e, k in eps.items():
                other = baseline_key(store, baseline, k)
                note = (f'{series} is compared with {baseline}\'s '
                        f'{other.split("/")[0]} attack: without elliptical '
                        'layers the two are one.')
                if other != k and note not in paired['notes']:
                    paired['notes'].append(note)
                paired['series'][series][f'{e:g}'] = test(
                    [read(name, k)], [read(baseline, other)],
                    f'{series} {e:g}')
        for e, areas in s['worst_areas'].items():
            paired['worst'][e] = test([areas], [base['worst_areas'].get(e)],
                                      f'the worst case at eps {e}')
        common = [e for e in s['worst_areas'] if e in base['worst_areas']]
        paired['worst_mean'] = test(
            [s['worst_areas'][e]
             for e in common], [base['worst_areas'][e] for e in common],
            'the worst case over eps') if common else None
        s['paired'] = paired
    for s in out.values():
        s.pop('worst_areas')
        s.pop('series_keys')
    return out


def attack_markdown(summary: Dict[str, Dict], settings: Dict) -> str:
    """The models' mIoU per attack and eps, the worst case, the means over
    eps and the paired verdicts against the baseline (without a title:
    :func:`write_attack_report` adds it)."""
    epsilons = sorted({e
                       for s in summary.values()
                       for e in s['worst']},
                      key=float)
    header = [
        'model', 'attack', 'clean', *[f'eps {e}' for e in epsilons],
        'mean over eps'
    ]
    rows = []
    for name, s in summary.items():
        for series, values in {
                **s['series'], 'worst case': s['worst']
        }.items():
            mean = s['mean_over_eps']['worst' if series ==
                                      'worst case' else series]
            rows.append([
                name, series, s['clean'], *[values.get(e) for e in epsilons],
                mean
            ])
    lines = [
        'mIoU under white-box attacks (series `ATTACK/NORM/STEPS`; eps in '
        f'{"0-255 levels" if settings.get("norm") == "linf" else "0-1"}; '
        'the worst case takes, per image, the attack that hurts it most). '
        'Settings: ' +
        ', '.join(f'{k.replace("_", " ")} {v}'
                  for k, v in settings.items() if v not in
                  (None, {}) and k not in ('threat', 'per_class')) + '.', '',
        markdown_table(header, rows, '.2f', left=2)
    ]
    paired = []
    for name, s in summary.items():
        p = s.get('paired')
        if not p:
            continue
        results = [(f'worst case, eps {e}', r) for e, r in p['worst'].items()]
        results.append(('worst case, mean over eps', p['worst_mean']))
        for what, r in results:
            if r is None:
                continue
            paired.append(f'- {name} - {s["baseline"]}, {what}: '
                          f'{interval(r, " mIoU")}. Paired bootstrap over '
                          f'{r["images"]} images.')
        paired += [f'- {n}' for n in p['notes']]
    if paired:
        lines += ['', '## Against the baseline', '', *paired]
    notes = [f'- {n}: {x}' for n, s in summary.items() for x in s['notes']]
    if notes:
        lines += ['', '## Notes', '', *notes]
    return '\n'.join(lines) + '\n'


def attack_rows(store: ResultStore, names: Sequence[str]) -> tuple:
    """CSV header and one row per model and cell."""
    header = ['model', 'cell', 'mIoU', 'aAcc', 'mAcc', 'max_linf', 'max_l2']
    rows = [[name, key, *[c.get(k) for k in header[2:]]] for name in names
            for key, c in store.data['models'][name]['cells'].items()]
    return header, rows


def attack_curves(summary: Dict[str, Dict], norm: str):
    """mIoU against eps, the clean mIoU at eps 0: a colour per attack (the
    worst case black), a line style per model, crosses for the adaptive
    attacks."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    styles = ['-', '--', ':', '-.']
    colours = {a: f'C{i}' for i, a in enumerate(ATTACKS)}
    for m, (name, s) in enumerate(summary.items()):
        curves = {**s['series'], 'worst case': s['worst']}
        for series, values in curves.items():
            attack = series.split('/')[0]
            points = [(0., s['clean'])] + [(float(e), v)
                                           for e, v in values.items()]
            points = [(e, v) for e, v in points if v is not None]
            ax.plot(
                *zip(*points),
                linestyle=styles[m % len(styles)],
                marker='x' if attack.endswith('-adaptive') else 'o',
                markersize=4,
                color=colours.get(attack.replace('-adaptive', ''), 'black'),
                label=wrap_label(f'{name}: {series}', 32))
    ax.set_xlabel(f'eps ({"0-255 levels" if norm == "linf" else "L2, 0-1"})')
    ax.set_ylabel('mIoU')
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.legend(
        fontsize=7, loc='upper left', bbox_to_anchor=(1.02, 1), handlelength=3)
    return fig


def write_attack_report(store: ResultStore,
                        names: Sequence[str],
                        work_dir: str,
                        baseline: Optional[str] = None,
                        resamples: int = 1000,
                        seed: int = 0) -> str:
    """Add the summary to ``adversarial.json`` and write
    ``adversarial.{md,csv,png}``.

    Returns:
        str: The markdown: a title, then :func:`attack_markdown`.
    """
    summary = attack_summary(store, names, baseline, resamples, seed)
    store.data['summary'] = summary
    store.save()
    settings = store.data['settings']
    text = '# Adversarial robustness\n\n' + attack_markdown(summary, settings)
    write_report(
        work_dir,
        'adversarial',
        markdown=text,
        table=attack_rows(store, names),
        figure=attack_curves(summary, settings.get('norm', 'linf')))
    return text
