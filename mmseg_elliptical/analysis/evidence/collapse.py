"""The collapse report: per layer, models side by side, and the arms'
means (the measurement: :mod:`.collapse_meter`)."""
from typing import Dict, List, Optional

from ...robustness.seeds.arms import collapse_arms
from ...robustness.seeds.means import arm_label, mean_tree, several
from ...robustness.seeds.report import arms_markdown, arms_rows
from ...utils.output import markdown_table, pyplot, wrap_label, write_report


def collapse_table(results: Dict[str, Dict]) -> tuple:
    """``(header, rows)``: one row per layer, models side by side."""
    names = list(results)
    layers = max(len(r['cosine']) for r in results.values())
    ell = [
        n for n in names
        if any(v is not None for v in results[n]['relevance_spread'])
    ]
    first = results[names[0]]
    header = ['layer', 'stage', 'tokens'] + [f'{n} cos' for n in names] + \
        [f'{n} m spread' for n in ell]
    rows = []
    for i in range(layers):
        row = [
            i, first['stage'][i] if i < len(first['stage']) else None,
            first['tokens'][i] if i < len(first['tokens']) else None
        ]
        for key, models in (('cosine', names), ('relevance_spread', ell)):
            row += [
                results[n][key][i] if i < len(results[n][key]) else None
                for n in models
            ]
        rows.append(row)
    return header, rows


def collapse_figure(results: Dict[str, Dict],
                    part: str,
                    arms: Optional[Dict[str, List[str]]] = None):
    """Cosine per layer (left) and the spread of ``m`` (right, from 0), one
    line per model, the legend below the panels; dotted lines mark where a
    new stage starts. An arm of several runs (``arms``) is one colour: its
    runs thin, their mean thick."""
    arms = arms or {n: [n] for n in results}
    ell = [
        n for n, r in results.items()
        if any(v is not None for v in r['relevance_spread'])
    ]
    panels = 2 if ell else 1
    plt = pyplot()
    fig, axes = plt.subplots(
        1,
        panels,
        figsize=(4.2 * panels, 3.6),
        squeeze=False,
        layout='constrained')
    tops = [0.0]
    for colour, (arm, runs) in enumerate(arms.items()):
        for k, key in enumerate(('cosine', 'relevance_spread')):
            if key == 'relevance_spread' and not set(runs) & set(ell):
                continue
            ax = axes[0][k]
            curves = [results[r][key] for r in runs]
            if len(runs) > 1:
                for values in curves:
                    _line(ax, values, colour, lw=0.7, alpha=0.45, ms=0)
            mean = mean_tree(curves)
            label = wrap_label(arm_label(arm, runs), 50) if k == 0 else None
            shown = _line(ax, mean, colour, lw=1.5, ms=3, label=label)
            tops += shown if k == 1 else []
    axes[0][0].set_ylabel('mean pairwise cosine of tokens')
    axes[0][0].set_title(
        'representation collapse (lower: more diverse)', fontsize=9)
    if ell:
        ax = axes[0][1]
        ax.set_ylim(0, 1.1 * max(tops) or 1)  # a spread: 0 is the dot product
        ax.set_ylabel('std of m over coordinates')
        ax.set_title('spread of the relevance m (0: dot product)', fontsize=9)
    stages = next(iter(results.values()))['stage']
    starts = [i for i in range(1, len(stages)) if stages[i] != stages[i - 1]]
    for ax in axes[0]:
        for i in starts:
            ax.axvline(i - 0.5, color='0.6', ls=':', lw=0.8)
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.set_xlabel(f'{part} layer (forward order across stages)')
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if any(len(r) > 1 for r in arms.values()):  # the thin lines, once
        handles.append(plt.Line2D([], [], color='0.3', lw=0.7, alpha=0.45))
        labels.append('thin: each run of an arm')
    fig.legend(
        handles,
        labels,
        loc='outside lower center',
        ncols=1 if max(len(n)
                       for n in labels) > 50 // len(labels) else len(labels),
        fontsize=7)
    return fig


def _line(ax, values: List[Optional[float]], colour: int, **style) -> list:
    """Plot the known values of one curve per layer; return them."""
    xs = [i for i, v in enumerate(values) if v is not None]
    ys = [values[i] for i in xs]
    ax.plot(xs, ys, marker='o', color=f'C{colour}', **style)
    return ys


def write_collapse_report(results: Dict[str, Dict],
                          out_dir: str,
                          part: str,
                          arms: Optional[Dict[str, List[str]]] = None) -> str:
    """Write ``collapse.{json,md,csv,png}`` (and, when an arm of ``arms``
    has two or more runs, its mean +- sd per layer in ``collapse.md``,
    ``collapse_arms.{json,csv}``); return the markdown."""
    header, rows = collapse_table(results)
    text = markdown_table(header, rows, left=0)
    notes = [
        f'- {n}: {r["images"]} images, {r["samples"]} samples '
        f'({r["inference"]})' for n, r in results.items()
    ]
    text += '\n' + '\n'.join(notes) + '\n'
    if several(arms):
        by_arm = collapse_arms(arms, results)
        text += '\n' + arms_markdown(by_arm, what='cosine', spec='.3f')
        write_report(
            out_dir, 'collapse_arms', data=by_arm, table=arms_rows(by_arm))
    write_report(
        out_dir,
        'collapse',
        data=results,
        markdown=text,
        table=(header, rows),
        figure=collapse_figure(results, part, arms))
    return text
