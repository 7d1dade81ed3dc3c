"""The robustness report: :func:`write_robustness_report` writes the
corruption grid's verdicts
(:func:`~..verdicts.corruptions.corruption_verdicts`) as
``robustness.{md,csv,png}`` and ``robustness_summary.csv``."""
from typing import Dict, List, Optional, Sequence, Tuple

from ...utils.output import markdown_table, write_report
from ..grid.store import CLEAN
from ..seeds.arms import CORRUPTION_FIGURES
from ..seeds.report import RUN_BY_RUN, arms_markdown, arms_rows
from ..statistics.paired import interval
from ..statistics.record import Verdicts
from .cells import GROUPS
from .figure import heatmaps


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


def write_robustness_report(verdicts: Verdicts, work_dir: str) -> str:
    """Write ``robustness.{md,csv,png}`` and ``robustness_summary.csv`` (and,
    when an arm has two or more runs, ``robustness_arms.csv``) of the
    corruption grid's verdicts.

    Args:
        verdicts (Verdicts): What
            :func:`~..verdicts.corruptions.corruption_verdicts` returns.
        work_dir (str): Where to write.

    Returns:
        str: The markdown.
    """
    summary = verdicts.summary
    corruptions = verdicts.settings['corruptions']
    severities = verdicts.settings['severities']
    text = grid_markdown(summary, corruptions, severities)
    drawn = verdicts.means or summary
    if verdicts.means:
        text = (
            arms_markdown(verdicts.arms, CORRUPTION_FIGURES) + RUN_BY_RUN +
            text)
        write_report(
            work_dir, 'robustness_arms', table=arms_rows(verdicts.arms))
    write_report(
        work_dir,
        'robustness',
        markdown=text,
        table=csv_rows(summary, corruptions, severities),
        figure=heatmaps(drawn, corruptions, severities))
    write_report(
        work_dir,
        'robustness_summary',
        table=summary_rows(summary, corruptions))
    return text
