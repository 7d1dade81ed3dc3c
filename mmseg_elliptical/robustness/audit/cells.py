"""The audit's extra cells: the eps sweep, doubled steps, the square
attack and the transfers (:mod:`..verdicts.audit` judges them)."""
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from ...utils.config import ModelSpec
from ..attacks.cells import QUERY_ATTACKS, Attack, AuditPreset
from ..attacks.transfer import transfer_cells
from ..grid.loop import key_of

#: The eps (L-inf levels) of the audit's sweep, up to the whole 0-255 range:
#: at 255 levels the ball holds every image, so only an attack that cannot
#: follow the gradient leaves accuracy above the floor (Carlini et al.'s
#: unbounded attack; an honest model short of it can still stand at 64).
SWEEP = (8., 16., 32., 64., 128., 255.)
#: EOT's draws per step in the audit's remedy cells.
EOT_DRAWS = 8


def audit_cells(
        per_model: Dict[str, List],
        specs: Sequence[ModelSpec],
        epsilons: Sequence[float],
        queries: int,
        step_ratio: Optional[float] = None,
        cfg_options: Optional[Dict] = None,
        sweep: Sequence[float] = SWEEP,
        sweep_attacks: Optional[Sequence[str]] = None,
        doubled_attacks: Optional[Sequence[str]] = None,
        arms: Optional[Dict[str, List[str]]] = None,
        preset: Optional[AuditPreset] = None,
        class_weights: Optional[Dict[str, Tuple]] = None) -> Dict[str, List]:
    """Each model's cells with the audit's extra cells added (on the same
    images): its gradient attacks at the largest headline eps again at each
    larger eps of ``sweep`` (``sweep_attacks`` only, when given; the step
    scaled with eps, :func:`sweep_step`), its
    iterative attacks with twice the steps at the headline eps
    (``doubled_attacks`` only, when given), FGSM at
    each headline eps (where the run has none: the single-step check), the
    square attack with ``queries`` at the headline eps, and every other model's
    attacks at the headline eps transferred to it (with ``arms``, the
    other arms' runs only: :func:`transfer_sources`).

    Args:
        per_model (dict): ``{name: cells}`` of the run.
        specs (Sequence[ModelSpec]): The models.
        epsilons (Sequence[float]): The headline eps.
        queries (int): The square attack's queries.
        step_ratio (float, optional): The step as a fraction of eps (the
            sweep's steps scale with it); None: the run's fixed step.
        cfg_options (dict, optional): The grid's config overrides.
        sweep (Sequence[float]): The sweep's eps.
        sweep_attacks (Sequence[str], optional): The attacks swept (None:
            every gradient attack of the run).
        doubled_attacks (Sequence[str], optional): The attacks run again
            with twice the steps (None: every iterative one; fewer make a
            reduced audit, and its verdict says so).
        arms (dict, optional): ``{arm: [runs]}``.
        preset (AuditPreset, optional): Sweep ``preset.sweep_attack`` with
            ``preset.sweep_steps`` iterations at the largest headline eps
            and each larger eps of ``sweep`` (through ``m`` too where the
            model has adaptive cells) instead of the run's own attacks, and
            again with twice the iterations at the largest headline eps;
            ``preset.margin_attack`` there too.
        class_weights (dict, optional): ``{model: weights}`` of the
            preset's balanced attack.

    Returns:
        dict: ``{name: cells}``, the run's first, without duplicates.
    """
    sources = transfer_sources(arms or {s.name: [s.name] for s in specs})
    by_name = {s.name: s for s in specs}
    top = max(epsilons)
    own = {
        name: [
            c for c in cells if type(c) is Attack and c.eps in epsilons
            and c.name not in QUERY_ATTACKS
        ]
        for name, cells in per_model.items()
    }
    out = {}
    for spec in specs:
        mine = own[spec.name]
        extra = [] if preset else [
            replace(c, eps=e, step_size=sweep_step(c, e, step_ratio))
            for c in mine if c.eps == top for e in sweep
            if e > top and (sweep_attacks is None or c.name in sweep_attacks)
        ]
        if preset and mine:
            extra += [
                Attack(
                    preset.sweep_attack,
                    'linf',
                    e,
                    preset.sweep_steps,
                    2.,
                    adaptive=a,
                    labels=mine[0].labels,
                    seed=mine[0].seed,
                    class_weights=(class_weights or {}).get(spec.name))
                for a in sorted({c.adaptive
                                 for c in mine})
                for e in [top, *[e for e in sweep if e > top]]
            ]
            extra += [  # the worst case's cell, doubled too
                replace(c, steps=2 * c.steps) for c in extra if c.eps == top
            ]
            extra += [  # the margin loss (saturated logits)
                replace(c, name=preset.margin_attack, class_weights=None)
                for c in extra
                if c.eps == top and c.steps == preset.sweep_steps
            ]
        extra += [
            replace(c, steps=2 * c.steps) for c in mine
            if c.name != 'fgsm' and (
                doubled_attacks is None or c.name in doubled_attacks)
        ]
        if mine:
            extra += [
                Attack(
                    'fgsm',
                    'linf',
                    e,
                    1,
                    e,
                    labels=mine[0].labels,
                    seed=mine[0].seed) for e in epsilons
                if not any(m.name == 'fgsm' and m.eps == e for m in mine)
            ]
            extra += [
                Attack(
                    'square',
                    'linf',
                    e,
                    queries,
                    1.,
                    labels=mine[0].labels,
                    seed=mine[0].seed) for e in epsilons
            ]
        for other in sources[spec.name]:
            extra += transfer_cells(own[other], by_name[other], cfg_options)
        cells = list(per_model[spec.name])
        keys = {key_of(c) for c in cells}
        for c in extra:
            if key_of(c) not in keys:
                keys.add(key_of(c))
                cells.append(c)
        out[spec.name] = cells
    return out


def sweep_step(cell: Attack, eps: float, step_ratio: Optional[float]) -> float:
    """The step of ``cell`` swept to ``eps``: ``step_ratio * eps``, or the
    cell's own step scaled with eps (a fixed step, 5 steps of 1 level,
    could never leave a ball of 5 levels, and the sweep would stall)."""
    if step_ratio is not None:
        return step_ratio * eps
    return cell.step_size * eps / cell.eps


def transfer_sources(arms: Dict[str, List[str]]) -> Dict[str, List[str]]:
    """The runs whose attacks transfer to each run: run ``I`` of an arm
    takes run ``I`` of every other arm (its last, when it has fewer), so
    the transfers grow with the arms, not with their runs squared; runs of
    one arm (the same method) never transfer to each other."""
    return {
        run: [
            others[min(i,
                       len(others) - 1)] for other, others in arms.items()
            if other != arm
        ]
        for arm, runs in arms.items()
        for i, run in enumerate(runs)
    }


def remedy_cells(cells: Sequence,
                 top: float,
                 preset: AuditPreset,
                 draws: int = EOT_DRAWS) -> List[Attack]:
    """What a model that failed the audit runs next (Athalye et al.): the
    preset's swept attack at the largest headline eps ``top`` (each form
    the model has there) through BPDA, and averaged over ``draws`` draws
    (EOT); their worst case is the robust number the audit reports."""
    mine = [
        c for c in cells if type(c) is Attack and c.name == preset.sweep_attack
        and c.eps == top and c.steps == preset.sweep_steps
    ]
    return [replace(c, bpda=True) for c in mine] + \
        [replace(c, eot=draws) for c in mine]
