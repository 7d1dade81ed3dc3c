"""The gradient-masking audit's table: one row per model and check with the
numbers that decide it (the failing cell named), the notes (suspect
transfers) and the verdicts; every comparison stays in the JSON
(``summary[MODEL]["audit"]["checks"][i]["rows"]``)."""
from typing import Dict, List

from ...utils.output import markdown_table

RESULT = {True: 'pass', False: 'FAIL', None: 'not checked'}


def deciding_cell(check: Dict) -> str:
    """The cell a reader looks at: the deciding row's (marked when it
    fails; of several, the one furthest beyond its tolerance, else the
    first), or ``-``."""
    rows = check.get('rows') or []
    failed = [r for r in rows if r.get('passed') is False]
    row = (failed or rows or [{}])[0]
    if len(failed) > 1:
        row = max(
            failed, key=lambda r: r.get('excess', 0.) - r.get('tolerance', 0.))
    cell = row.get('cell')
    if not cell:
        return '-'
    return f'`{cell}` (fails)' if failed else f'`{cell}`'


def audit_markdown(summary: Dict[str, Dict]) -> List[str]:
    """The audit's table of every model that has one (markdown lines)."""
    rows = [[
        name, c['check'],
        'inconclusive' if c.get('inconclusive') else RESULT[c['passed']],
        deciding_cell(c), c['detail']
    ] for name, s in summary.items()
            for c in (s.get('audit') or {}).get('checks', [])]
    if not rows:
        return []
    notes = [
        f'- {name}: {note}.' for name, s in summary.items()
        for note in (s.get('audit') or {}).get('notes', [])
    ]
    verdicts = [
        f'- {name}: {s["audit"]["verdict"]}.' for name, s in summary.items()
        if s.get('audit')
    ]
    return [
        '', '## Gradient-masking audit', '',
        markdown_table(
            ['model', 'check', 'result', 'deciding cell', 'numbers (aAcc, %)'],
            rows,
            left=5), '', *([
                'Transfers more accurate than the clean images (a transfer '
                'should not help; look at these cells):', '', *notes, ''
            ] if notes else []), *verdicts
    ]
