"""The paired test and its sentence, shared by the corruption and the attack
reports: :func:`bootstrap_or_note` runs :func:`~.bootstrap.paired_bootstrap`
or says why not, :func:`interval` writes its result."""
import re
from typing import Dict, List, Optional

from .bootstrap import paired_bootstrap


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
    counts = {len(x[0]) for x in a}, {len(x[0]) for x in b}
    if counts[0] != counts[1]:  # a store without the images' paths
        notes.append(f'No paired test on {what}: the test sets differ '
                     f'({"/".join(map(str, sorted(counts[0])))} against '
                     f'{"/".join(map(str, sorted(counts[1])))} images).')
        return None
    try:
        return paired_bootstrap(a, b, resamples, seed)
    except ValueError as e:
        notes.append(f'No paired test on {what}: {e}')
        return None


def fold_notes(notes: List[str]) -> List[str]:
    """``notes`` with every ``No paired test on WHAT: WHY`` of one WHY
    folded into one line (``No paired test on A, B, C: WHY``) where the
    first of them stood; other notes as they are."""
    out: List = []
    whats: Dict[str, List[str]] = {}
    for note in notes:
        found = re.match(r'No paired test on (.*?): (.*)$', note, re.S)
        if found is None:
            out.append((None, note))
            continue
        what, why = found.groups()
        if why not in whats:
            whats[why] = []
            out.append((why, None))
        whats[why].append(what)
    return [
        note
        if why is None else f'No paired test on {", ".join(whats[why])}: {why}'
        for why, note in out
    ]


def interval(result: Dict, unit: str = '') -> str:
    """``DIFFERENCE[ UNIT] (95 % interval LOW to HIGH; VERDICT)`` of a
    :func:`~.bootstrap.paired_bootstrap` result."""
    return (f'{result["difference"]:+.2f}{unit} (95 % interval '
            f'{result["low"]:+.2f} to {result["high"]:+.2f}; '
            f'{result["verdict"]})')
