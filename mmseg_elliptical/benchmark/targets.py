"""The targets of ``tools/analysis_tools/benchmark.py``'s ratios
(docs/benchmark.md): elliptical / baseline per role and quantity."""
import operator
from typing import Dict

#: ``(baseline role, quantity): (bound, strict)``: elliptical / baseline <=
#: bound (< when strict); the adaptive attack step is reported, not judged.
TARGETS = {
    ('fused-dot', 'time'): (1.03, False),
    ('fused-dot', 'memory'): (1.01, False),
    ('mmseg-dot', 'time'): (1.0, True),
}
#: Verdicts of a ratio against a target (see :func:`judge`).
MET, NOISE, MISSED = 'met', 'within noise', 'missed'


def judge(ratio: Dict) -> Dict:
    """Add ``{time,memory}_{target,verdict}`` to a ratio row: the bound of
    :data:`TARGETS`; ``'met'`` if the upper quartile of the per-round ratios
    is within it, ``'within noise'`` if the lower one is, else ``'missed'``
    (memory: one number); None without a target (adaptive step)."""
    quartiles = dict(
        time=(ratio['time_q1'], ratio['time_q3']),
        memory=(ratio['memory'], ratio['memory']))
    for quantity, (q1, q3) in quartiles.items():
        bound = None if ratio.get('mode') == 'attack-adaptive' else \
            TARGETS.get((ratio['role'], quantity))
        target = verdict = None
        if bound is not None and q1 is not None:
            limit, strict = bound
            ok = operator.lt if strict else operator.le
            target = f'{"<" if strict else "<="} {limit:g}'
            verdict = MET if ok(q3, limit) else NOISE if ok(q1, limit) \
                else MISSED
        ratio[f'{quantity}_target'], ratio[f'{quantity}_verdict'] = \
            target, verdict
    return ratio
