"""A gradient-masking audit of one model's attack cells (Athalye et al.,
ICML 2018; Carlini et al., 2019): its checks on the stored cells, each with
the tolerance of :mod:`.tolerance`, and its verdict (every check, its rule
and its power: docs/evidence.md, "The gradient-masking audit")."""
from typing import Callable, Dict, List, Optional, Sequence

from ..attacks.cells import AUDIT_PRESET, QUERY_ATTACKS, AuditPreset
from .cells import SWEEP
from .classes import class_check, class_row, floor_row
from .compare import check_of, compare, lowest, split_key, worst_miou, worst_of
from .images import MIN_IMAGES, image_check, image_row
from .progress import (progress_check, progress_row, sanity_check,
                       strength_check)
from .sweep import FLOOR, kind_of, sweep_check, swept_series  # noqa: F401

CLEAN_VERDICT = 'no sign of gradient masking'
#: The verdict's start when no check failed or was undecided but some were
#: not made: never the clean phrase.
UNCHECKED = 'inconclusive: not checked: '
BUDGET = 'budget below the audit preset'
SINGLE_STEP = ('fgsm', 'fgsm-adaptive')
#: aAcc points by which twice the steps may lower the worst case beyond the
#: paired tolerance before the attack counts as not converged.
ITERATIONS_MARGIN = 1.0
#: aAcc points by which the attacks through ``m`` may beat the plain ones
#: beyond the paired tolerance: the two follow other paths, and cell by cell
#: either ends lower (the bootstrap over images does not hold that).
ADAPTIVE_MARGIN = 1.0


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
    black = {
        e: [k for k in keys if kind_of(k) in ('transfer', 'query')]
        for e, keys in at.items()
    }
    checks = [  # the sweep first, as before
        sweep_check(cells, correct, max(epsilons), sweep),
        sanity_check(cells, correct)
    ]
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
    checks.append(
        image_check('white-box beats black-box per image', [
            image_row(
                f'eps {e:g}', white[e],
                [k for k in at[e] if kind_of(k) in ('transfer', 'query')],
                correct) for e in epsilons
        ], 'no transfer or query cell', 'black-box cells'))
    checks.append(
        progress_check([
            progress_row(e, white[e], black[e], cells, correct)
            for e in epsilons
        ]))
    checks.append(strength_check(epsilons, white, black, cells, correct))
    checks.append(
        class_check([
            class_row(f'eps {e:g}', white[e], black[e], correct)
            for e in epsilons
        ] + [
            floor_row(s[max(s)], correct)
            for s in swept_series(cells, max(epsilons), sweep)
            if max(s) == max(sweep)
        ]))
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
                    margin=ITERATIONS_MARGIN))
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
                    compare(
                        f'eps {e:g}',
                        plain,
                        adaptive,
                        cells,
                        correct,
                        lowest(plain, cells),
                        margin=ADAPTIVE_MARGIN))
        checks.append(
            check_of(
                'adaptive', rows, 'no adaptive cell',
                lambda r: f'{r["what"]}: plain {r["first"]:.2f}, adaptive '
                f'{r["second"]:.2f}'))
    if budget is None:
        budget = budget_shortfalls(cells, epsilons, sweep, preset)
    images = images_of(cells, correct)
    remedies = remedy_of(cells, correct, white, max(epsilons))
    verdict = verdict_of(checks, budget, images, preset)
    verdict += ''.join(f'; {c["note"]}' for c in checks if c.get('note'))
    if remedies:
        verdict += (f'; with BPDA and EOT the worst case at eps '
                    f'{remedies["eps"]:g} is {remedies["aAcc"]:.2f} % aAcc '
                    f'(without: {remedies["without"]:.2f})')
    return dict(
        checks=checks,
        worst={
            f'{e:g}': worst_of([*white[e], *black[e]], cells, correct)[0]
            for e in epsilons if white[e] or black[e]
        },
        notes=notes,
        budget=list(budget),
        images=images,
        preset=preset_text(preset),
        remedies=remedies,
        verdict=verdict)


def remedy_of(cells: Dict[str, Dict], correct: Callable,
              white: Dict[float, List[str]], top: float) -> Optional[Dict]:
    """The robust number of the BPDA and EOT cells at ``top`` (run when
    the audit failed): the worst case over them and the white-box cells,
    beside the white-box worst case alone; None without such cells."""
    found = [
        k for k in cells if k.count('/') == 3 and kind_of(k) == 'remedy'
        and split_key(k)[2] == top
    ]
    if not found or not white.get(top):
        return None
    both = worst_of([*white[top], *found], cells, correct)[0]
    alone = worst_of(white[top], cells, correct)[0]
    return dict(
        eps=top,
        cells=found,
        aAcc=both,
        without=alone,
        mIoU=worst_miou([*white[top], *found], correct))


def images_of(cells: Dict[str, Dict], correct: Callable) -> Optional[int]:
    """The test images of a model's cells (None: no per-image areas)."""
    for key in cells:
        found = correct(key)
        if found is not None:
            return len(found[1])
    return None


def preset_text(preset: AuditPreset = AUDIT_PRESET) -> str:
    """The preset in words, as the verdict names it."""
    return (f'audit preset: {preset.sweep_attack} {preset.sweep_steps} '
            f'iterations swept to {max(SWEEP):g} levels and doubled, '
            f'{preset.margin_attack}, square {preset.queries} queries, '
            'transfers')


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
    margin = max((s for n, _, e, s in keys
                  if n.replace('-adaptive', '') == preset.margin_attack
                  and e == max(epsilons)),
                 default=0)
    if margin < preset.sweep_steps:
        out.append(f'{preset.margin_attack} {margin} iterations at eps '
                   f'{max(epsilons):g} (preset: {preset.sweep_steps}, the '
                   'margin loss)')
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
        and kind_of(f'{n}/{norm}/{e:g}/{s}') != 'remedy'
        and n.replace('-adaptive', '') not in single and (
            n, norm, e, 2 * s) not in keys and (n, norm, e, s / 2) not in keys
        and n.replace('-adaptive', '') != preset.margin_attack  # not doubled
    })
    if undoubled:
        out.append(f'not run with twice the steps: {", ".join(undoubled)} '
                   '(preset: every iterative attack)')
    if not any('@' in n for n, *_ in keys):
        out.append('no transfer from another model')
    return out


def verdict_of(checks: List[Dict],
               budget: Optional[Sequence[str]] = None,
               images: Optional[int] = None,
               preset: Optional[AuditPreset] = None) -> str:
    """``no sign of gradient masking`` (every check made and passed),
    ``failed: `` the failed checks, or ``inconclusive: `` the undecided
    ones and ``not checked: `` those not made, then the image count and
    the preset (when given) and the budget's shortfalls."""
    failed = [c['check'] for c in checks if c['passed'] is False]
    open_ = [c['check'] for c in checks if c.get('inconclusive')]
    missing = [
        c['check'] for c in checks
        if c['passed'] is None and not c.get('inconclusive')
    ]
    verdict = 'failed: ' + ', '.join(failed) if failed else \
        'inconclusive: ' + ', '.join(open_) if open_ else \
        UNCHECKED + ', '.join(missing) if missing else CLEAN_VERDICT
    if missing and open_ and not failed:
        verdict += f'; not checked: {", ".join(missing)}'
    if preset is not None:
        few = '' if images is None or images >= MIN_IMAGES else \
            f', fewer than {MIN_IMAGES}'
        count = 'images not stored' if images is None else \
            f'{images} image{"s" * (images != 1)}{few}'
        verdict += f'; {count}, {preset_text(preset)}'
    if budget:
        verdict += f'; {BUDGET}: {", ".join(budget)}'
    return verdict
