"""Each model's cells of an attack grid (the protocols and cells:
:mod:`..attacks.cells`)."""
import argparse
from typing import Dict, List, Sequence

from ...errors import ConfigError
from ..attacks.cells import ATTACK_PROTOCOLS, Attack, attack_cells
from ..attacks.eps import parse_eps


def model_cells(elliptical: Dict[str, bool], plain: Sequence[Attack],
                adaptive: Sequence[Attack]) -> Dict[str, List]:
    """Each model's cells: the clean one, ``plain``, then ``adaptive`` when
    the model has elliptical layers (``{name: has them}``)."""
    return {
        name: [(None, None), *plain, *(adaptive if has else [])]
        for name, has in elliptical.items()
    }


def command_cells(args: argparse.Namespace, adaptive: bool) -> List[Attack]:
    """The attack cells of ``tools/analysis_tools/adversarial.py``'s command
    line (:func:`~..attacks.cells.attack_cells`); the square attack's steps
    are its queries, and it has no adaptive form (it reads outputs only)."""
    gradient = [a for a in args.attacks if a != 'square']
    cells = attack_cells(gradient, args.norm, args.epsilons, args.steps,
                         args.step_size, args.step_ratio, args.random_start,
                         adaptive, args.labels, args.seed)
    if 'square' in args.attacks and not adaptive:
        cells += attack_cells(['square'], args.norm, args.epsilons,
                              [args.queries or 100], 1., None, False, False,
                              args.labels, args.seed)
    return cells


def protocol_defaults(args: argparse.Namespace) -> None:
    """Fill ``adversarial.py``'s options from its ``--protocol``, with its
    eps in the norm's scale (:func:`~..attacks.eps.parse_eps`).

    Raises:
        ConfigError: A combination the attacks refuse (the argument named).
    """
    preset = ATTACK_PROTOCOLS[args.protocol]
    args.attacks = args.attacks or list(preset.attacks)
    args.norm = args.norm or preset.norm
    if 'square' in args.attacks and args.norm != 'linf':
        raise ConfigError(
            'argument --attacks: the square attack is L-inf only; '
            'pass --norm linf or drop square.')
    if args.audit and args.norm != 'linf':
        raise ConfigError(
            'argument --audit: its eps sweep and square attack are '
            'L-inf; pass --norm linf.')
    try:
        args.epsilons = [
            parse_eps(e, args.norm, args.allow_small_eps, args.allow_large_eps)
            for e in args.epsilons
        ] if args.epsilons else list(preset.epsilons)
    except ConfigError as e:
        raise ConfigError(f'argument --epsilons: {e}') from None
    args.steps = args.steps or [preset.steps]
    args.labels = args.labels or preset.labels
    if args.norm == 'linf' and args.step_size is None:
        args.step_size = preset.step_size
    if args.norm == 'l2' and args.step_size is None and preset.step_size:
        raise ConfigError(
            'argument --step-size: give the L2 step (0-1 scale); '
            f'the {args.protocol} protocol\'s is in L-inf levels')
    args.step_ratio = preset.step_ratio if args.step_size is None else None
