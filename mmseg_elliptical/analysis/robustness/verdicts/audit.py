"""A gradient-masking audit of one model's attack cells (Athalye et al.,
ICML 2018; Carlini et al., "On Evaluating Adversarial Robustness", 2019).

Each check reads stored cells only (aAcc, pooled over pixels, in percent;
"the worst case" over cells is their per-image minimum, the number the
worst-case verdict uses) and each comparison allows the tolerance of
:mod:`.tolerance` (a paired bootstrap over the test images), printed in the
check's detail:

* ``eps sweep``: the white-box series swept furthest (lowest aAcc at the
  sweep's largest eps) falls to :data:`FLOOR` (within the tolerance) at some
  eps of the sweep (up to 255 levels, the whole range); else it says where
  the aAcc stopped falling;
* ``white-box beats black-box``: at every headline eps the worst case over
  the white-box cells is at most each black-box cell's aAcc (transfer
  ``ATTACK@SOURCE``, query ``square``);
* ``iterations``: at every headline eps the worst case over the white-box
  cells does not fall when the cells run with twice the steps are added (an
  attack that still gains from more steps had not converged), by more than
  the worst case's own interval (its precision on these images: a paired
  interval would flag the small, steady gain any attack makes from more
  steps);
* ``single step``: at every headline eps the worst case over the iterative
  white-box cells is at most the FGSM cell's aAcc (an iterative attack
  weaker than one step points to masking);
* ``adaptive`` (models with elliptical layers): the worst case over the
  plain cells is at most the worst over the adaptive ones (else the
  gradient stopped at ``m`` hides a weakness).

A transfer cell more accurate than the clean images beyond the tolerance is
named in ``notes`` as suspect (a transfer should not help). The verdict is
``no sign of gradient masking`` or names the failed checks; a run below the
audit preset's budget (:data:`~..grid.audit_cells.AUDIT_PRESET`: the sweep
of APGD-MCE-Bal with 100 iterations to 255 levels, 1000 square queries, a
transfer) says so (``budget below the audit preset: ...``): a reduced
audit's "no sign" is weaker evidence.
"""
from typing import Callable, Dict, List, Optional, Sequence

from ....utils.attack_cells import AUDIT_PRESET, QUERY_ATTACKS, AuditPreset
from ..grid.audit_cells import SWEEP
from .audit_compare import check_of, compare
from .audit_compare import kind_of as _kind_of
from .audit_compare import lowest, split_key, worst_of
from .tolerance import tolerance

#: The aAcc (percent) the eps sweep must fall to.
FLOOR = 1.0
CLEAN_VERDICT = 'no sign of gradient masking'
BUDGET = 'budget below the audit preset'
SINGLE_STEP = ('fgsm', 'fgsm-adaptive')


def kind_of(key: str) -> str:
    """``'transfer'``, ``'query'``, ``'adaptive'`` or ``'plain'``."""
    return _kind_of(key, QUERY_ATTACKS)


def sweep_check(cells: Dict[str, Dict], correct: Callable, top: float,
                sweep: Sequence[float]) -> Dict:
    """The eps sweep of the white-box series swept furthest."""
    swept = [
        k for k in cells
        if k.count('/') == 3 and kind_of(k) in ('plain', 'adaptive')
        and split_key(k)[2] in set(sweep) and split_key(k)[2] > top
    ]
    if not swept:
        return dict(
            check='eps sweep', passed=None, detail='no sweep cell', rows=[])
    far = max(split_key(k)[2] for k in swept)
    name, norm, _, steps = split_key(
        lowest([k for k in swept if split_key(k)[2] == far], cells))
    series = {
        split_key(k)[2]: k
        for k in cells
        if k.count('/') == 3 and split_key(k)[:2] == (name, norm)
        and split_key(k)[3] == steps and split_key(k)[2] in set(sweep) | {top}
    }
    at_top = [
        k for k in cells
        if k.count('/') == 3 and split_key(k)[:3] == (name, norm, top)
    ]
    if top not in series and at_top:  # the sweep ran with other steps
        series[top] = lowest(at_top, cells)
    curve = sorted(series.items())
    values = [(e, k, worst_of([k], cells, correct)) for e, k in curve]
    e_low, k_low, (a_low, px, labelled) = min(values, key=lambda v: v[2][0])
    tol = tolerance(px, None, labelled)
    passed = a_low - FLOOR <= tol.points + 1e-9
    text = ', '.join(f'eps {e:g}: {v[0]:.2f}' for e, _, v in values)
    if not passed:
        stop = next((e for (e, _, a), (_, _, b) in zip(values, values[1:])
                     if b[0] >= a[0]), None)
        text += (f'; it stops falling at eps {stop:g}' if stop is not None else
                 f'; still falling at eps {values[-1][0]:g} (more '
                 'iterations or a larger eps would tell)')
    row = dict(
        what=f'eps {e_low:g}',
        first=a_low,
        second=FLOOR,
        excess=a_low - FLOOR,
        tolerance=tol.points,
        images=tol.images,
        passed=bool(passed),
        cell=k_low,
        first_cells=[k_low],
        second_cells=[],
        curve={
            f'{e:g}': v[0]
            for e, _, v in values
        })
    return dict(
        check='eps sweep',
        passed=bool(passed),
        detail=f'{name}/{norm}/{steps} aAcc {text} (must fall to '
        f'{FLOOR:g} %); {tol}',
        rows=[row])


def gradient_masking_audit(cells: Dict[str, Dict],
                           correct: Callable,
                           epsilons: Sequence[float],
                           elliptical: bool,
                           sweep: Sequence[float] = SWEEP,
                           budget: Optional[Sequence[str]] = None,
                           preset: AuditPreset = AUDIT_PRESET) -> Dict:
    """The audit of one model.

    Args:
        cells (dict): ``{cell_key: metrics}`` of the model (``aAcc``).
        correct (callable): ``correct(key)`` -> ``(correct, labelled)``
            pixels per image, or None.
        epsilons (Sequence[float]): The headline eps.
        elliptical (bool): Whether the model has elliptical layers.
        sweep (Sequence[float]): The sweep's eps.
        budget (Sequence[str], optional): Where the run's budget is below
            the audit preset's; None: :func:`budget_shortfalls` of the cells.
        preset (AuditPreset): The preset the budget is measured against.

    Returns:
        dict: ``checks`` (``[{check, passed, detail, rows}]``; ``passed``
        None: its cells are missing; ``rows`` every comparison), ``notes``
        (suspect transfer cells) and ``verdict``.
    """
    attacks = [k for k in cells if k.count('/') == 3]
    at = {e: [k for k in attacks if split_key(k)[2] == e] for e in epsilons}
    white = {
        e: [k for k in keys if kind_of(k) in ('plain', 'adaptive')]
        for e, keys in at.items()
    }
    half = {
        k
        for k in attacks if split_key(k)[3] %
        2 == 0 and '{0}/{1}/{2:g}/{3}'.format(*split_key(k)[:3],
                                              split_key(k)[3] // 2) in cells
    }
    checks = [sweep_check(cells, correct, max(epsilons), sweep)]
    rows, notes = [], []
    for e in epsilons:
        for k in at[e]:
            if kind_of(k) not in ('transfer', 'query'):
                continue
            rows.append(
                compare(f'eps {e:g}', white[e], [k], cells, correct, k))
            if kind_of(k) == 'transfer' and 'clean' in cells:
                up = compare(f'eps {e:g}', [k], ['clean'], cells, correct, k)
                if up is not None and not up['passed']:
                    notes.append(
                        f'suspect: `{k}` leaves {up["first"]:.2f} % aAcc, '
                        f'above the clean {up["second"]:.2f} % by more than '
                        f'the tolerance {up["tolerance"]:.2f}')
    checks.append(
        check_of(
            'white-box beats black-box', rows, 'no transfer or query cell',
            lambda r:
            f'{r["what"]}: white-box {r["first"]:.2f} vs `{r["cell"]}` '
            f'{r["second"]:.2f}'))
    rows = []
    for e in epsilons:
        doubled = [
            k for k in white[e]
            if k in half and split_key(k)[0] not in SINGLE_STEP
        ]
        base = [k for k in white[e] if k not in doubled]
        if doubled and base:
            rows.append(
                compare(
                    f'eps {e:g}',
                    base,
                    white[e],
                    cells,
                    correct,
                    lowest(doubled, cells),
                    own=True))
    checks.append(
        check_of(
            'iterations', rows, 'no doubled-steps cell', lambda r:
            f'{r["what"]}: worst {r["first"]:.2f} -> {r["second"]:.2f} '
            f'with twice the steps (lowest: `{r["cell"]}`)'))
    rows = []
    for e in epsilons:
        single = [k for k in white[e] if split_key(k)[0] in SINGLE_STEP]
        many = [k for k in white[e] if k not in single]
        if single and many:
            rows.append(
                compare(f'eps {e:g}', many, single, cells, correct,
                        lowest(single, cells)))
    checks.append(
        check_of(
            'single step', rows, 'no FGSM cell',
            lambda r: f'{r["what"]}: iterative worst {r["first"]:.2f} vs '
            f'`{r["cell"]}` {r["second"]:.2f}'))
    if elliptical:
        rows = []
        for e in epsilons:
            plain = [k for k in white[e] if kind_of(k) == 'plain']
            adaptive = [k for k in white[e] if kind_of(k) == 'adaptive']
            if plain and adaptive:
                rows.append(
                    compare(f'eps {e:g}', plain, adaptive, cells, correct,
                            lowest(plain, cells)))
        checks.append(
            check_of(
                'adaptive', rows, 'no adaptive cell',
                lambda r: f'{r["what"]}: plain {r["first"]:.2f}, adaptive '
                f'{r["second"]:.2f}'))
    if budget is None:
        budget = budget_shortfalls(cells, epsilons, sweep, preset)
    return dict(
        checks=checks,
        notes=notes,
        budget=list(budget),
        verdict=verdict_of(checks, budget))


def budget_shortfalls(cells: Dict[str, Dict],
                      epsilons: Sequence[float],
                      sweep: Sequence[float] = SWEEP,
                      preset: AuditPreset = AUDIT_PRESET) -> List[str]:
    """Where the cells fall short of ``preset``: the sweep (its attack with
    its iterations up to the sweep's largest eps), the square attack's
    queries at each headline eps, an iterative attack at a headline eps
    without its twice-the-steps twin, a transfer; ``[]`` at the preset."""
    keys = [split_key(k) for k in cells if k.count('/') == 3]
    out = []
    far = max(sweep)
    swept = [(n, s) for n, _, e, s in keys if e == far and '@' not in n]
    if not any(
            n.replace('-adaptive', '') == preset.sweep_attack
            and s >= preset.sweep_steps for n, s in swept):
        got = ', '.join(f'{n} {s}' for n, s in sorted(set(swept))) or 'none'
        out.append(f'swept to {far:g} levels: {got} (preset: '
                   f'{preset.sweep_attack} {preset.sweep_steps} iterations)')
    for e in epsilons:
        queries = max(
            (s for n, _, e2, s in keys if n in QUERY_ATTACKS and e2 == e),
            default=0)
        if queries < preset.queries:
            out.append(f'square {queries} queries at eps {e:g} (preset: '
                       f'{preset.queries})')
    single = {name.replace('-adaptive', '') for name in SINGLE_STEP}
    undoubled = sorted({
        n
        for n, norm, e, s in keys
        if e in epsilons and '@' not in n and n not in QUERY_ATTACKS
        and n.replace('-adaptive', '') not in single and (
            n, norm, e, 2 * s) not in keys and (n, norm, e, s / 2) not in keys
        and n.replace('-adaptive', '') != preset.sweep_attack  # the sweep's
    })
    if undoubled:
        out.append(f'not run with twice the steps: {", ".join(undoubled)} '
                   '(preset: every iterative attack)')
    if not any('@' in n for n, *_ in keys):
        out.append('no transfer from another model')
    return out


def verdict_of(checks: List[Dict],
               budget: Optional[Sequence[str]] = None) -> str:
    """``no sign of gradient masking`` or ``failed: `` the failed checks,
    with the checks not made and the budget's shortfalls."""
    failed = [c['check'] for c in checks if c['passed'] is False]
    verdict = CLEAN_VERDICT if not failed else \
        'failed: ' + ', '.join(failed)
    missing = [c['check'] for c in checks if c['passed'] is None]
    if missing and not failed:
        verdict += f' (not checked: {", ".join(missing)})'
    if budget:
        verdict += f'; {BUDGET}: {", ".join(budget)}'
    return verdict
