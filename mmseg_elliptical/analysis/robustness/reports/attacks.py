"""The adversarial report: :func:`write_attack_report` writes the attack
grid's verdicts (:func:`~..verdicts.attacks.attack_verdicts`) as
``adversarial.{md,csv,png}``."""
from typing import Dict, List, Optional

from ....utils.eps import eps_units
from ....utils.output import markdown_table, pyplot, wrap_label, write_report
from ..attacks.pgd import ATTACKS, PERTURBERS
from ..verdicts.paired import interval
from ..verdicts.record import Verdicts
from .arms import arms_markdown, arms_rows
from .audit import audit_markdown
from .sea import sea_text

#: How far right an adaptive curve is drawn, as a fraction of the largest
#: eps (its points keep their eps in the table and the CSV).
ADAPTIVE_SHIFT = 0.012


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


def attack_curves(summary: Dict[str, Dict],
                  norm: str,
                  runs: Optional[Dict[str, List[Dict]]] = None):
    """mIoU against eps, the clean mIoU at eps 0: a colour per attack (the
    worst case black), a line style per model; the adaptive attacks dashed,
    with hollow diamonds, drawn over the plain ones and nudged right by
    :data:`ADAPTIVE_SHIFT` of the largest eps (where the two coincide, both
    stay visible). ``runs``: for an entry of ``summary`` that is an arm's
    mean, its runs' summaries: their worst cases drawn as thin lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    styles = ['-', '--', ':', '-.']
    # every attack its colour (square too: black is the worst case's)
    colours = {a: f'C{i}' for i, a in enumerate([*ATTACKS, *PERTURBERS])}
    for m, (name, s) in enumerate(summary.items()):
        for run in (runs or {}).get(name, []):
            points = [(0., run['clean'])
                      ] + [(float(e), v) for e, v in worst_miou(run).items()]
            points = [(e, v) for e, v in points if v is not None]
            ax.plot([e for e, _ in points], [v for _, v in points],
                    linestyle=styles[m % len(styles)],
                    linewidth=0.7,
                    alpha=0.45,
                    color='black',
                    zorder=1)
        curves = {**s['series'], 'worst case': worst_miou(s)}
        for series, values in curves.items():
            if all(v is None for v in values.values()):
                continue  # e.g. an arm's transfer series, named by a run
            attack = series.split('/')[0]
            points = [(0., s['clean'])] + [(float(e), v)
                                           for e, v in values.items()]
            points = [(e, v) for e, v in points if v is not None]
            adaptive = attack.endswith('-adaptive')
            # An adaptive curve often lies on its plain twin: drawn over it,
            # thinner, dashed, hollow and nudged right, so both show.
            shift = ADAPTIVE_SHIFT * max(
                (float(e) for e in values), default=1.) if adaptive else 0.
            ax.plot(
                [e + shift * (e > 0) for e, _ in points],
                [v for _, v in points],
                linestyle=(0, (3, 2)) if adaptive else styles[m % len(styles)],
                linewidth=1. if adaptive else 1.5,
                marker='D' if adaptive else 'o',
                markerfacecolor='none' if adaptive else None,
                markersize=5 if adaptive else 4,
                zorder=3 if adaptive else 2,
                color=colours.get(attack.replace('-adaptive', ''), 'black'),
                label=wrap_label(f'{name}: {series}', 32))
    if runs:
        ax.plot([], [],
                color='black',
                linewidth=0.7,
                alpha=0.45,
                label='each run\'s worst case')
    ax.set_xlabel(f'eps ({"0-255 levels" if norm == "linf" else "L2, 0-1"})')
    ax.set_ylabel('mIoU')
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.legend(
        fontsize=7, loc='upper left', bbox_to_anchor=(1.02, 1), handlelength=3)
    return fig


def write_attack_report(verdicts: Verdicts, work_dir: str) -> str:
    """Write ``adversarial.{md,csv,png}`` (and, when an arm has two or more
    runs, ``adversarial_arms.csv``) of the attack grid's verdicts.

    Args:
        verdicts (Verdicts): :func:`~..verdicts.attacks.attack_verdicts`.
        work_dir (str): Where to write.

    Returns:
        str: The markdown: a title, then :func:`attack_markdown` (and the
        arms, where one has two or more runs).
    """
    summary, settings = verdicts.summary, verdicts.settings
    text = '# Adversarial robustness\n\n' + attack_markdown(summary, settings)
    drawn, runs = summary, None
    if verdicts.means:
        text += '\n## Arms\n\n' + arms_markdown(verdicts.arms)
        drawn = verdicts.means
        runs = {
            label: [summary[r] for r in verdicts.runs[arm]]
            for label, arm in zip(drawn, verdicts.runs)
            if len(verdicts.runs[arm]) > 1
        }
        write_report(
            work_dir, 'adversarial_arms', table=arms_rows(verdicts.arms))
    write_report(
        work_dir,
        'adversarial',
        markdown=text,
        table=attack_rows(verdicts.cells),
        figure=attack_curves(drawn, settings.get('norm', 'linf'), runs))
    return text
