"""The gradient-masking audit's table."""
from typing import Dict, List

from ....utils.output import markdown_table


def audit_markdown(summary: Dict[str, Dict]) -> List[str]:
    """The audit's table of every model that has one (markdown lines)."""
    rows = [[
        name, c['check'], {
            True: 'pass',
            False: 'FAIL',
            None: 'not checked'
        }[c['passed']], c['detail']
    ] for name, s in summary.items()
            for c in (s.get('audit') or {}).get('checks', [])]
    if not rows:
        return []
    verdicts = [
        f'- {name}: {s["audit"]["verdict"]}.' for name, s in summary.items()
        if s.get('audit')
    ]
    return [
        '', '## Gradient-masking audit', '',
        markdown_table(['model', 'check', 'result', 'numbers (aAcc, %)'],
                       rows,
                       left=4), '', *verdicts
    ]
