"""A gradient-masking audit of one model's attack cells (Athalye et al.,
ICML 2018; Carlini et al., "On Evaluating Adversarial Robustness", 2019).

Each check reads stored cells only (aAcc, pooled over pixels, in percent):

* ``eps sweep``: the strongest white-box attack (lowest aAcc at the largest
  headline eps) reaches an aAcc below :data:`FLOOR` at some eps of the
  sweep (up to 64 levels); else the check fails and says at which eps the
  aAcc stopped falling;
* ``white-box beats black-box``: at every headline eps the worst white-box
  aAcc (per-image minimum over the white-box cells) is at most each
  black-box cell's (transfer ``ATTACK@SOURCE``, query ``square``) plus
  :data:`SLACK` points;
* ``iterations``: an iterative attack run with twice its steps does not
  leave the model more accurate than :data:`SLACK` points above the
  original;
* ``adaptive`` (models with elliptical layers): the worst case over the
  adaptive cells beside the worst over the plain ones; it fails when the
  plain attacks leave the model more than :data:`SLACK` points more
  accurate (the gradient stopped at ``m`` hides a weakness).

The verdict is ``no sign of gradient masking`` or names the failed checks.
"""
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..grid.audit_cells import QUERY_ATTACKS, SWEEP

#: Points of aAcc a black-box attack or more iterations may gain on the
#: white-box worst case before the check fails.
SLACK = 0.5
#: The aAcc (percent) the eps sweep must fall below.
FLOOR = 1.0
CLEAN_VERDICT = 'no sign of gradient masking'


def kind_of(key: str) -> str:
    """``'transfer'``, ``'query'``, ``'adaptive'`` or ``'plain'``."""
    name = key.split('/')[0]
    if '@' in name:
        return 'transfer'
    if name in QUERY_ATTACKS:
        return 'query'
    return 'adaptive' if name.endswith('-adaptive') else 'plain'


def split_key(key: str) -> tuple:
    """``(attack, norm, eps, steps)`` of ``ATTACK/NORM/EPS/STEPS``."""
    name, norm, eps, steps = key.split('/')
    return name, norm, float(eps), int(steps)


def min_aacc(keys: Sequence[str], cells: Dict[str, Dict],
             correct: Callable) -> Optional[float]:
    """aAcc of the per-image minimum over ``keys`` (``correct(key)``:
    ``(correct, labelled)`` pixels per image, or None: then the lowest
    pooled aAcc of the cells, a weaker bound)."""
    if not keys:
        return None
    found = [correct(k) for k in keys]
    if all(f is not None for f in found):
        right = np.min([f[0] for f in found], axis=0)
        return float(100 * right.sum() / max(found[0][1].sum(), 1))
    values = [cells[k].get('aAcc') for k in keys]
    return None if None in values else float(min(values))


def bounded(check: str, compared: Sequence[Tuple[float, float, str]],
            empty: str) -> Dict:
    """A check passed when each ``(low, high, line)`` of ``compared`` has
    ``low <= high + SLACK`` (None without any), its detail the lines (or
    ``empty``)."""
    passed = all(lo <= hi + SLACK
                 for lo, hi, _ in compared) if compared else None
    return dict(
        check=check,
        passed=passed,
        detail='; '.join(line for *_, line in compared) or empty)


def gradient_masking_audit(cells: Dict[str, Dict],
                           correct: Callable,
                           epsilons: Sequence[float],
                           elliptical: bool,
                           sweep: Sequence[float] = SWEEP) -> Dict:
    """The audit of one model.

    Args:
        cells (dict): ``{cell_key: metrics}`` of the model (``aAcc``).
        correct (callable): ``correct(key)`` -> ``(correct, labelled)``
            pixels per image, or None.
        epsilons (Sequence[float]): The headline eps.
        elliptical (bool): Whether the model has elliptical layers.
        sweep (Sequence[float]): The sweep's eps.

    Returns:
        dict: ``checks`` (``[{check, passed, detail}]``; ``passed`` None:
        its cells are missing) and ``verdict``.
    """
    attacks = [k for k in cells if k.count('/') == 3]
    at = {e: [k for k in attacks if split_key(k)[2] == e] for e in epsilons}
    white = {
        e: [k for k in keys if kind_of(k) in ('plain', 'adaptive')]
        for e, keys in at.items()
    }
    checks: List[Dict] = []
    # eps sweep: the strongest white-box series at the largest headline eps
    # among those swept.
    top = max(epsilons)
    for key in sorted(
            white.get(top, []), key=lambda k: cells[k].get('aAcc', 101)):
        name, norm, _, steps = split_key(key)
        curve = sorted((split_key(k)[2], cells[k].get('aAcc')) for k in attacks
                       if split_key(k)[0] == name and split_key(k)[3] == steps
                       and split_key(k)[2] in set(sweep) | {top})
        if len(curve) > 1:
            break
    else:
        curve = []
    if curve:
        text = ', '.join(f'eps {e:g}: {a:.2f}' for e, a in curve)
        passed = min(a for _, a in curve) < FLOOR
        if not passed:
            stop = next(
                (e for (e, a), (_, b) in zip(curve, curve[1:]) if b >= a),
                None)
            text += (f'; it stops falling at eps {stop:g}' if stop is not None
                     else f'; still falling at eps {curve[-1][0]:g} (more '
                     'iterations or a larger eps would tell)')
        checks.append(
            dict(
                check='eps sweep',
                passed=passed,
                detail=f'{name}/{norm}/{steps} aAcc {text} (must fall below '
                f'{FLOOR:g} %)'))
    else:
        checks.append(
            dict(check='eps sweep', passed=None, detail='no sweep cell'))
    # White-box beats black-box.
    compared = []
    for e in epsilons:
        box = min_aacc(white[e], cells, correct)
        for k in at[e]:
            if kind_of(k) in ('transfer', 'query') and box is not None:
                compared.append((box, cells[k]['aAcc'],
                                 f'eps {e:g}: white-box {box:.2f} vs `{k}` '
                                 f'{cells[k]["aAcc"]:.2f}'))
    checks.append(
        bounded('white-box beats black-box', compared,
                'no transfer or query cell'))
    # Iterations: each cell whose doubled-steps twin is stored.
    compared = []
    for k in attacks:
        name, norm, e, steps = split_key(k)
        twin = f'{name}/{norm}/{e:g}/{2 * steps}'
        if e in epsilons and twin in cells and name != 'fgsm':
            compared.append((cells[twin]['aAcc'], cells[k]['aAcc'],
                             f'`{k}` {cells[k]["aAcc"]:.2f} -> '
                             f'{2 * steps} steps {cells[twin]["aAcc"]:.2f}'))
    checks.append(bounded('iterations', compared, 'no doubled-steps cell'))
    if elliptical:
        compared = []
        for e in epsilons:
            plain = min_aacc([k for k in white[e] if kind_of(k) == 'plain'],
                             cells, correct)
            adaptive = min_aacc(
                [k for k in white[e] if kind_of(k) == 'adaptive'], cells,
                correct)
            if plain is not None and adaptive is not None:
                compared.append((plain, adaptive, f'eps {e:g}: plain '
                                 f'{plain:.2f}, adaptive {adaptive:.2f}'))
        checks.append(bounded('adaptive', compared, 'no adaptive cell'))
    failed = [c['check'] for c in checks if c['passed'] is False]
    verdict = CLEAN_VERDICT if not failed else \
        'failed: ' + ', '.join(failed)
    missing = [c['check'] for c in checks if c['passed'] is None]
    if missing and not failed:
        verdict += f' (not checked: {", ".join(missing)})'
    return dict(checks=checks, verdict=verdict)
