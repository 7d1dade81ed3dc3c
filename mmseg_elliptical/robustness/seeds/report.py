"""The arms' part of a report (:mod:`.arms`' results): per arm, each
headline number as ``mean +- sd (n runs)`` and the hierarchical paired
tests against the baseline arm with both intervals and the verdict."""
from typing import Dict, List, Optional, Sequence

from ...utils.output import markdown_table

#: Between the arms' verdicts and the run-by-run numbers below them.
RUN_BY_RUN = ('\n## Run by run\n\nEach run\'s own numbers; its paired test '
              'compares it with the baseline arm\'s first run (not the '
              'verdict: that is the arms\' test above).\n\n')


def mean_sd(fig: Optional[Dict], spec: str = '.2f') -> Optional[str]:
    """``MEAN +- SD (N runs)``, ``VALUE (1 run)``, or None (no value)."""
    if not fig or fig['mean'] is None:
        return None
    if fig['n'] < 2:
        return f'{fig["mean"]:{spec}} (1 run)'
    return f'{fig["mean"]:{spec}} +- {fig["sd"]:{spec}} ({fig["n"]} runs)'


def arms_rows(arms: Dict[str, Dict]) -> tuple:
    """``(header, rows)`` of the arms' CSV: a row per arm and number, its
    mean, sd and run count, then each run's value."""
    most = max((len(a['runs']) for a in arms.values()), default=0)
    header = ['arm', 'number', 'mean', 'sd', 'n'
              ] + [f'run{i}' for i in range(most)]
    rows = [[name, key, f['mean'], f['sd'], f['n'], *f['runs']]
            for name, a in arms.items() for key, f in a['figures'].items()]
    return header, rows


def arm_interval(result: Dict) -> str:
    """``DIFF (95 % interval LOW to HIGH; Welch LOW to HIGH; VERDICT)``."""
    welch = result.get('welch')
    welch = '' if not welch else \
        f'; Welch {welch["low"]:+.2f} to {welch["high"]:+.2f}'
    return (f'{result["difference"]:+.2f} (95 % interval '
            f'{result["low"]:+.2f} to {result["high"]:+.2f}{welch}; '
            f'{result["verdict"]})')


def seed_list(arm: Dict, base: Dict) -> str:
    """`` (training seeds 0, 1, 2 / 0, 1, 2)`` where every run's seed is
    known (:func:`~..verdicts.arms.seeds_of`), else empty."""
    parts = []
    for entry in (arm, base):
        seeds = entry.get('seeds') or {}
        if not entry.get('runs') or set(seeds) != set(entry['runs']):
            return ''
        parts.append(', '.join(str(seeds[r]) for r in entry['runs']))
    return f' (training seeds {" / ".join(parts)})'


def verdict_lines(arms: Dict[str, Dict], what: str = 'mIoU') -> List[str]:
    """One markdown line per hierarchical paired test of an arm against
    the baseline arm, then the arms' notes: the verdicts across seeds."""
    lines: List[str] = []
    for name, a in arms.items():
        for stat, r in (a.get('paired') or {}).items():
            if r is None:
                continue
            seeds = seed_list(a, arms.get(a['baseline'], {}))
            lines.append(
                f'- {name} - {a["baseline"]}, {stat} {what}: '
                f'{arm_interval(r)}. Hierarchical paired bootstrap over '
                f'{r["images"]} images and {r["runs"][0]} / {r["runs"][1]} '
                f'runs{seeds}, {r["resamples"]} resamples, seed {r["seed"]}.')
        lines += [f'- {name}: {n}' for n in a.get('notes', [])]
    return lines


def arms_markdown(arms: Dict[str, Dict],
                  keys: Optional[Sequence[str]] = None,
                  what: str = 'mIoU',
                  spec: str = '.2f') -> str:
    """A table of the arms' figures (a row per number of ``keys``, default
    all but those no arm has a value of, such as a transfer cell named by
    its source run; a column per arm; values formatted with ``spec``) and
    one line per hierarchical paired test (markdown, without a title)."""
    keys = list(
        keys or dict.fromkeys(k for a in arms.values() for k in a['figures']))
    rows = [[k] + [mean_sd(a['figures'].get(k), spec) for a in arms.values()]
            for k in keys]
    rows = [r for r in rows if any(v is not None for v in r[1:])]
    lines = verdict_lines(arms, what)
    text = [
        'Arms (runs of one name; mean +- sample sd over the runs):', '',
        markdown_table(['number', *arms], rows, left=1)
    ]
    if lines:
        text += ['', *lines]
    return '\n'.join(text) + '\n'
