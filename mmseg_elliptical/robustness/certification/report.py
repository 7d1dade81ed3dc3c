"""The certification grid's report: a table per run, the arms' verdicts,
and ``certify.png``: certified mIoU and abstain rate against the radius."""
from typing import Dict, List

from ...utils.output import markdown_table, pyplot, write_report
from ..seeds.report import arms_markdown

COLUMNS = ('sigma', 'tau', 'correction', 'radius', 'mIoU', 'aAcc', 'abstain')


def certify_markdown(verdicts: Dict, settings: Dict) -> str:
    """The report's markdown: the settings, each run's table, the arms."""
    text = [
        '# Certified robustness (SegCertify, randomised smoothing)', '',
        f'n0 = {settings["n0"]} selection draws and n = {settings["n"]} '
        f'counting draws per image, alpha = {settings["alpha"]} per image; '
        'L2 radius on the 0-1 scale, sigma * Phi^-1(tau); an abstaining '
        'pixel counts as wrong in mIoU and aAcc (percent); abstain: the '
        'fraction of pixels that abstain.', ''
    ]
    for run, entry in verdicts['runs'].items():
        clean = entry['clean']
        text += [
            f'## {run}', '',
            'Clean mIoU: ' + ('-' if clean is None else f'{clean:.2f}'), '',
            markdown_table(
                COLUMNS, [[r[k] for k in COLUMNS] for r in entry['rows']],
                ['g', 'g', '', '.3f', '.2f', '.2f', '.3f'],
                left=3), ''
        ]
    text += ['## Arms', '', arms_markdown(verdicts['arms'])]
    return '\n'.join(text)


def certify_rows(verdicts: Dict) -> tuple:
    """``(header, rows)`` of ``certify.csv``: a row per run and cell."""
    rows: List = [[run, *[r[k] for k in COLUMNS]]
                  for run, e in verdicts['runs'].items() for r in e['rows']]
    return ['model', *COLUMNS], rows


def certify_figure(verdicts: Dict):
    """Certified mIoU (left) and abstain rate (right) against the radius,
    a line per run (colour), noise level (marker) and correction (Holm
    solid, Bonferroni dotted).

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    plt = pyplot()
    fig, (miou, abstain) = plt.subplots(
        1, 2, figsize=(10, 4), layout='constrained')
    colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for k, (run, entry) in enumerate(verdicts['runs'].items()):
        series: Dict = {}
        for r in entry['rows']:
            if r['mIoU'] is not None:
                series.setdefault((r['sigma'], r['correction']), []).append(r)
        sigmas = sorted({s for s, _ in series})
        for (sigma, correction), rows in series.items():
            rows = sorted(rows, key=lambda r: r['radius'])
            style = dict(
                color=colours[k % len(colours)],
                marker='osd^v'[sigmas.index(sigma) % 5],
                linestyle='-' if correction == 'holm' else ':',
                label=f'{run}, sigma {sigma:g}, {correction}')
            radii = [r['radius'] for r in rows]
            miou.plot(radii, [r['mIoU'] for r in rows], **style)
            abstain.plot(radii, [r['abstain'] for r in rows], **style)
    miou.set(
        xlabel='certified L2 radius (0-1 scale)',
        ylabel='certified mIoU (%)',
        ylim=(0, None))
    abstain.set(
        xlabel='certified L2 radius (0-1 scale)',
        ylabel='abstain rate',
        ylim=(0, 1))
    miou.legend(fontsize='small')
    return fig


def write_certify_report(verdicts: Dict, settings: Dict, work_dir: str) -> str:
    """Write ``certify.{md,csv,png}`` and the verdicts beside the store
    (``certify_verdicts.json``); return the markdown."""
    text = certify_markdown(verdicts, settings)
    write_report(
        work_dir,
        'certify',
        markdown=text,
        table=certify_rows(verdicts),
        figure=certify_figure(verdicts))
    write_report(work_dir, 'certify_verdicts', data=verdicts)
    return text
