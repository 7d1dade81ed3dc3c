"""The adversarial report: :func:`write_attack_report` writes the attack
grid's verdicts (:func:`~..verdicts.attacks.attack_verdicts`) as
``adversarial.{md,csv,png}``."""
import re
from collections import Counter
from typing import Dict, List, Optional

from matplotlib.lines import Line2D

from ...utils.output import markdown_table, pyplot, wrap_label, write_report
from ..audit.report import audit_markdown
from ..seeds.report import RUN_BY_RUN, arms_markdown, arms_rows
from ..statistics.paired import interval
from ..statistics.record import Verdicts
from .cells import ATTACKS, QUERY_ATTACKS
from .eps import eps_units

#: How far right an adaptive curve is drawn, as a fraction of the largest
#: headline eps (its points keep their eps in the table and the CSV).
ADAPTIVE_SHIFT = 0.012
#: An attack's colour, by its place in ATTACKS + QUERY_ATTACKS (grey and
#: black left out: those are the transfers' and the worst case's).
PALETTE = ('C0', 'C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C8', 'C9', 'navy',
           'goldenrod', 'teal')
#: The worst case's series name in the figure.
WORST = 'worst case'


def attack_markdown(summary: Dict[str, Dict], settings: Dict) -> str:
    """The models' mIoU per attack and eps, the worst case, the means over
    eps and the paired verdicts against the baseline (without a title:
    :func:`write_attack_report` adds it)."""
    epsilons = sorted({e
                       for s in summary.values()
                       for e in s['worst']},
                      key=float)
    norm = settings.get('norm')
    header = [
        'model', 'attack', 'clean', *[f'eps {e}' for e in epsilons],
        'mean over eps'
    ]
    rows = []
    for name, s in summary.items():
        for series, values in {
                **s['series'], 'worst case': worst_miou(s)
        }.items():
            mean = s['mean_over_eps']['worst' if series ==
                                      'worst case' else series]
            rows.append([
                name, series, s['clean'], *[values.get(e) for e in epsilons],
                mean
            ])
    lines = [
        'mIoU under white-box attacks (series `ATTACK/NORM/STEPS`; eps in '
        f'{"0-255 levels" if norm == "linf" else "0-1"}: '
        f'{", ".join(eps_units(float(e), norm) for e in epsilons)}; '
        'the worst case is SEA\'s: per image one of every attack cell at '
        'that eps, chosen by a greedy search for the lowest pooled mIoU). '
        'Settings: ' +
        ', '.join(f'{k.replace("_", " ")} {v}'
                  for k, v in settings.items() if v not in
                  (None, {}) and k not in ('threat', 'per_class')) + '.', '',
        markdown_table(header, rows, '.2f', left=2)
    ]
    worst = [
        f'- {name}, eps {e}: mIoU {w["mIoU"]:.2f}, aAcc '
        f'{"n/a" if w["aAcc"] is None else format(w["aAcc"], ".2f")} '
        f'(per-image minimum accuracy, pooled){sea_text(w)}; over '
        f'{len(w["cells"])} cells: ' + ', '.join(f'`{k}`'
                                                 for k in w['cells']) + '.'
        for name, s in summary.items() for e, w in s['worst'].items()
        if w is not None
    ]
    if worst:
        lines += ['', '## Worst case', '', *worst]
    lines += audit_markdown(summary)
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


def worst_miou(summary: Dict) -> Dict[str, Optional[float]]:
    """``{eps: mIoU}`` of a model's worst case (None: not computed)."""
    return {
        e: None if w is None else w['mIoU']
        for e, w in summary['worst'].items()
    }


def attack_rows(cells: Dict[str, Dict]) -> tuple:
    """CSV header and one row per model and cell of ``{run: cells}``."""
    header = ['model', 'cell', 'mIoU', 'aAcc', 'mAcc', 'max_linf', 'max_l2']
    rows = [[name, key, *[c.get(k) for k in header[2:]]]
            for name, by_key in cells.items() for key, c in by_key.items()]
    return header, rows


def series_style(series: str, steps: Optional[int]) -> Dict:
    """How one series is drawn: its attack's colour (the worst case
    black), dashed with hollow diamonds when adaptive, dotted when a
    transfer, thinner and paler at other steps than the model's usual
    (the audit's doubled steps)."""
    attack, *rest = series.split('/')
    base = re.sub(r'-adaptive|-bpda|-eot\d+', '', attack.split('@')[0])
    order = [*ATTACKS, *QUERY_ATTACKS]
    style = dict(
        color='black' if series == WORST else
        PALETTE[order.index(base) % len(PALETTE)] if base in order else '0.5',
        linewidth=2.2 if series == WORST else 1.4,
        linestyle='-',
        zorder=4 if series == WORST else 2)
    if attack.endswith('-adaptive'):
        style.update(
            linestyle=(0, (3, 2)),
            marker='D',
            zorder=3,
            markerfacecolor='none',
            markersize=5,
            linewidth=1.)
    if '@' in attack:
        style.update(linestyle=':')
    if rest and steps is not None and rest[-1] != str(steps):
        style.update(linewidth=0.9, alpha=0.6)
    return style


def attack_curves(summary: Dict[str, Dict],
                  norm: str,
                  runs: Optional[Dict[str, List[Dict]]] = None):
    """mIoU against eps, the clean mIoU at eps 0: the headline eps (those
    with a worst case) in the left panel, the audit's eps sweep beyond
    them, where there is one, in a panel of its own. A colour per attack
    (the worst case black), a marker per model; adaptive curves dashed
    with hollow diamonds and nudged right by :data:`ADAPTIVE_SHIFT` of the
    largest eps (where one lies on its plain twin both stay visible);
    transfers dotted; other step counts than a model's usual thinner.
    ``runs``: for an entry of ``summary`` that is an arm's mean, its runs'
    summaries, whose worst cases are drawn as thin unlabelled lines. The
    legend names each attack, model and style once."""
    plt = pyplot()
    headline = max((float(e) for s in summary.values() for e in s['worst']),
                   default=0.)
    swept = headline and any(
        float(e) > headline for s in summary.values()
        for v in s['series'].values() for e in v)
    fig, axes = plt.subplots(
        1,
        2 if swept else 1,
        figsize=(10 if swept else 7.5, 4),
        squeeze=False,
        gridspec_kw=dict(width_ratios=[3, 2] if swept else [1]))
    axes = list(axes[0])
    markers = ['o', 's', '^', 'v', 'P', 'X', '*', 'h']
    attacks, models = {}, {}
    for m, (name, s) in enumerate(summary.items()):
        marker = markers[m % len(markers)]
        models[name] = marker
        for run in (runs or {}).get(name, []):
            points = [(0., run['clean'])] + sorted(
                (float(e), v) for e, v in worst_miou(run).items())
            for ax in axes[:1]:
                ax.plot(
                    *zip(*[p for p in points if p[1] is not None]),
                    color='black',
                    linewidth=0.7,
                    alpha=0.45,
                    zorder=1)
        steps = Counter(k.split('/')[-1] for k in s['series']).most_common(1)
        steps = int(steps[0][0]) if steps else None
        for series, values in {**s['series'], WORST: worst_miou(s)}.items():
            if all(v is None for v in values.values()):
                continue  # e.g. an arm's transfer series, named by a run
            style = series_style(series, steps)
            attacks.setdefault(
                'worst case' if series == WORST else
                series.split('/')[0].split('@')[0].replace('-adaptive', ''),
                style['color'])
            style.setdefault('marker', marker)
            style.setdefault('markersize', 4)
            points = [(0., s['clean'])] + [(float(e), v)
                                           for e, v in values.items()]
            points = sorted(p for p in points if p[1] is not None)
            shift = ADAPTIVE_SHIFT * headline if style['marker'] == 'D' else 0
            for k, ax in enumerate(axes):
                if k and all(e <= headline for e, _ in points):
                    continue  # no point of the sweep
                shown = [
                    p for p in points
                    if (p[0] <= headline if k == 0 else p[0] >= headline)
                ]
                ax.plot([e + shift * (e > 0) for e, _ in shown],
                        [v for _, v in shown],
                        label=f'{name}: {series}',
                        **style)
    handles = [Line2D([], [], color=c, lw=2) for c in attacks.values()]
    labels = list(attacks)
    handles += [
        Line2D([], [], color='0.3', marker=mk, lw=0) for mk in models.values()
    ]
    labels += [f'model {n}' for n in models]
    seen = ' '.join(k for s in summary.values() for k in s['series'])
    if '-adaptive/' in seen:
        handles.append(
            Line2D([], [],
                   color='0.3',
                   linestyle=(0, (3, 2)),
                   marker='D',
                   markerfacecolor='none'))
        labels.append('adaptive (through m)')
    if '@' in seen:
        handles.append(Line2D([], [], color='0.3', linestyle=':'))
        labels.append('transfer (ATTACK@SOURCE)')
    if runs:
        handles.append(Line2D([], [], color='black', lw=0.7, alpha=0.45))
        labels.append('thin: each run\'s worst case')
    label = f'eps ({"0-255 levels" if norm == "linf" else "L2, 0-1"})'
    for k, ax in enumerate(axes):
        ax.set_xlabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(
            'headline eps' if k == 0 else 'the audit\'s eps sweep', fontsize=9)
    axes[0].set_xlim(left=0)
    axes[0].set_ylabel('mIoU')
    axes[-1].legend(
        handles, [wrap_label(x, 32) for x in labels],
        fontsize=7,
        loc='upper left',
        bbox_to_anchor=(1.02, 1),
        handlelength=3)
    fig.tight_layout()
    return fig


def write_attack_report(verdicts: Verdicts, work_dir: str) -> str:
    """Write ``adversarial.{md,csv,png}`` (and, when an arm has two or more
    runs, ``adversarial_arms.csv``) of the attack grid's verdicts.

    Args:
        verdicts (Verdicts): :func:`~..verdicts.attacks.attack_verdicts`.
        work_dir (str): Where to write.

    Returns:
        str: The markdown: a title, the arms' verdicts where an arm has
        two or more runs, then :func:`attack_markdown` run by run.
    """
    summary, settings = verdicts.summary, verdicts.settings
    text = attack_markdown(summary, settings)
    drawn, runs = summary, None
    if verdicts.means:
        text = ('## Arms\n\n' + arms_markdown(verdicts.arms) + RUN_BY_RUN +
                text)
        drawn = verdicts.means
        runs = {
            label: [summary[r] for r in verdicts.runs[arm]]
            for label, arm in zip(drawn, verdicts.runs)
            if len(verdicts.runs[arm]) > 1
        }
        write_report(
            work_dir, 'adversarial_arms', table=arms_rows(verdicts.arms))
    text = '# Adversarial robustness\n\n' + text
    write_report(
        work_dir,
        'adversarial',
        markdown=text,
        table=attack_rows(verdicts.cells),
        figure=attack_curves(drawn, settings.get('norm', 'linf'), runs))
    return text


def sea_text(worst: Dict) -> str:
    """``; as SEA's released code computes them: mIoU .., aAcc ..`` of a
    worst-case record, or ``''`` for a record of an older version."""
    if worst.get('mIoU_sea') is None:
        return ''
    aacc = worst.get('aAcc_sea')
    return (f'; as SEA\'s released code computes them: mIoU '
            f'{worst["mIoU_sea"]:.2f} (its search from '
            f'`{worst.get("sea_start")}`), aAcc '
            f'{"n/a" if aacc is None else format(aacc, ".2f")} (mean over '
            'images of each image\'s worst accuracy)')
