"""The adversarial report: :func:`write_attack_report` adds the summary
(:func:`~.attack_verdicts.attack_summary`) to ``adversarial.json`` and
writes ``adversarial.{md,csv,png}``."""
from typing import Dict, List, Optional, Sequence

from ...utils.output import markdown_table, pyplot, wrap_label, write_report
from .arms import attack_arms
from .arms_report import arms_markdown
from .attack_verdicts import attack_summary
from .attacks import ATTACKS
from .paired import interval
from .store import ResultStore


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
                        seed: int = 0,
                        arms: Optional[Dict[str, List[str]]] = None) -> str:
    """Add the per-run summary and the arms (:func:`~.arms.attack_arms`) to
    ``adversarial.json`` and write ``adversarial.{md,csv,png}``.

    Args:
        baseline (str, optional): The baseline arm; each run's paired tests
            compare with its first run.
        arms (dict, optional): ``{arm: [runs]}``; default: each model an
            arm of one run.

    Returns:
        str: The markdown: a title, then :func:`attack_markdown` (and the
        arms, where one has two or more runs).
    """
    arms = arms or {n: [n] for n in names}
    base_run = None if baseline is None else arms[baseline][0]
    summary = attack_summary(store, names, base_run, resamples, seed)
    store.data['summary'] = summary
    store.data['arms'] = attack_arms(store, arms, summary, baseline, resamples,
                                     seed)
    store.save()
    settings = store.data['settings']
    text = '# Adversarial robustness\n\n' + attack_markdown(summary, settings)
    if any(len(r) > 1 for r in arms.values()):
        text += '\n## Arms\n\n' + arms_markdown(store.data['arms'])
    write_report(
        work_dir,
        'adversarial',
        markdown=text,
        table=attack_rows(store, names),
        figure=attack_curves(summary, settings.get('norm', 'linf')))
    return text
