"""Which cells a robustness grid runs: corruption sets, groups, protocols.

The corruption names are ``imagecorruptions``' (Hendrycks & Dietterich,
ICLR 2019): 15 benchmark corruptions in four groups (noise, blur, weather,
digital) and 4 held-out ones, one of each group. A protocol fixes the
corruptions, the severities and the metrics its report averages.
"""
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ....transforms.image_corruption import (COMMON_CORRUPTIONS, CORRUPTIONS,
                                             EXTRA_CORRUPTIONS, SEVERITIES)
from ..attacks.apgd import APGD_ATTACKS, SEA_ATTACKS, stages
from ..attacks.pgd import Attack
from .store import GridError

#: The four groups of ImageNet-C, each with its held-out corruption last.
GROUPS: Dict[str, Tuple[str, ...]] = dict(
    noise=('gaussian_noise', 'shot_noise', 'impulse_noise', 'speckle_noise'),
    blur=('defocus_blur', 'glass_blur', 'motion_blur', 'zoom_blur',
          'gaussian_blur'),
    weather=('snow', 'frost', 'fog', 'brightness', 'spatter'),
    digital=('contrast', 'elastic_transform', 'pixelate', 'jpeg_compression',
             'saturate'))
#: Names ``--corruptions`` accepts besides single corruptions.
CORRUPTION_SETS: Dict[str, Tuple[str, ...]] = dict(
    all=CORRUPTIONS,
    common=COMMON_CORRUPTIONS,
    extra=EXTRA_CORRUPTIONS,
    **GROUPS)


class Protocol(NamedTuple):
    """A preset of the grid.

    Attributes:
        corruptions (tuple[str]): Grid rows.
        severities (tuple[int]): Grid columns.
        metrics (tuple[str]): Metrics whose clean value and mean over the
            corrupted cells the report gives (the first is ``--metric``'s
            default).
        description (str): What it reproduces.
    """
    corruptions: Tuple[str, ...]
    severities: Tuple[int, ...]
    metrics: Tuple[str, ...]
    description: str

    @property
    def passes(self) -> int:
        """Test passes per model: the clean set and every corrupted cell."""
        return 1 + len(self.corruptions) * len(self.severities)


PROTOCOLS: Dict[str, Protocol] = {
    'default':
    Protocol(CORRUPTIONS, SEVERITIES, ('mIoU', ),
             'all 19 corruptions at severities 1-5'),
    'ade20k-c':
    Protocol(
        COMMON_CORRUPTIONS, SEVERITIES, ('mIoU', ),
        'ADE20K-C: the 15 benchmark corruptions of Hendrycks & Dietterich at '
        'severities 1-5'),
    'paper':
    Protocol(
        CORRUPTIONS, (1, ), ('mIoU', 'mAcc', 'aAcc'),
        'the Elliptical Attention authors\' evaluation: 19 corruptions at '
        'severity 1, mIoU, mAcc and aAcc each averaged over the 19'),
}


def group_of(corruption: str) -> str:
    """The group (noise, blur, weather, digital) of a corruption."""
    for group, names in GROUPS.items():
        if corruption in names:
            return group
    raise GridError(f'Unknown corruption {corruption!r}.')


def resolve_corruptions(names: Sequence[str]) -> List[str]:
    """Expand set and group names and check every name.

    Args:
        names (Sequence[str]): Corruption names, or sets (``all``,
            ``common``, ``extra``) and groups (``noise``, ``blur``,
            ``weather``, ``digital``).

    Returns:
        list[str]: The corruptions, in order, without duplicates.

    Raises:
        GridError: An unknown name, naming the valid ones.
    """
    out: List[str] = []
    for name in names:
        for c in CORRUPTION_SETS.get(name, (name, )):
            if c not in CORRUPTIONS:
                raise GridError(f'Unknown corruption {c!r}; valid are '
                                f'{", ".join(CORRUPTIONS)} or a set '
                                f'({", ".join(CORRUPTION_SETS)}).')
            if c not in out:
                out.append(c)
    return out


def resolve_severities(severities: Sequence[int]) -> List[int]:
    """Sorted distinct severities, each checked to be 1-5.

    Raises:
        GridError: A severity out of range.
    """
    bad = [s for s in severities if s not in SEVERITIES]
    if bad:
        raise GridError(f'Unknown severities {bad}; valid are 1-5.')
    return sorted(set(severities))


class AttackProtocol(NamedTuple):
    """A preset of the adversarial grid.

    Attributes:
        attacks (tuple[str]): Attack names.
        norm (str): ``'linf'`` or ``'l2'``.
        epsilons (tuple[float]): Radii (L-inf: 0-255 levels).
        steps (int): Steps of the iterative attacks.
        step_size (float): Absolute step, or None to use ``step_ratio``.
        step_ratio (float): Step as a fraction of eps, when ``step_size`` is
            None.
        labels (str): ``'gt'`` or ``'prediction'``.
        description (str): What it reproduces.
    """
    attacks: Tuple[str, ...]
    norm: str
    epsilons: Tuple[float, ...]
    steps: int
    step_size: Optional[float]
    step_ratio: Optional[float]
    labels: str
    description: str

    def cells(self,
              adaptive: bool = False,
              labels: Optional[str] = None) -> List[Attack]:
        """The preset's attack cells (:func:`attack_cells`), through ``m``
        with ``adaptive``; ``labels`` replaces the preset's."""
        return attack_cells(
            self.attacks,
            self.norm,
            self.epsilons, [self.steps],
            self.step_size,
            self.step_ratio,
            adaptive=adaptive,
            labels=labels or self.labels)

    def settings(self) -> Dict:
        """:func:`attack_settings` of the preset."""
        return attack_settings(self.norm, self.step_size, self.step_ratio,
                               False, self.labels)

    def passes(self, labels: Optional[str] = None) -> Tuple[int, int]:
        """Forward and backward passes per image and model: the clean cell,
        then per attack cell one forward and backward per step (APGD: one
        more forward per stage, at its start, and none backward at its
        end; at most, as an image at 0 accuracy stops), the prediction, and
        the clean prediction when it gives the labels."""
        cells = self.cells(labels=labels)
        forward = sum(c.steps + 1 + (c.labels == 'prediction') +
                      (len(stages(c.norm, c.eps, c.steps)) if c.name in
                       APGD_ATTACKS else 0) for c in cells)
        return 1 + forward, sum(c.steps for c in cells)


def attack_cells(attacks: Sequence[str],
                 norm: str,
                 epsilons: Sequence[float],
                 steps: Sequence[int],
                 step_size: Optional[float] = None,
                 step_ratio: Optional[float] = None,
                 random_start: bool = False,
                 adaptive: bool = False,
                 labels: str = 'gt',
                 seed: int = 0) -> List[Attack]:
    """Every attack at each number of steps and eps, in that order, without
    duplicates (FGSM, one step, once per eps).

    Args:
        attacks (Sequence[str]): Attack names.
        norm (str): ``'linf'`` or ``'l2'``.
        epsilons (Sequence[float]): Radii.
        steps (Sequence[int]): Steps of the iterative attacks.
        step_size (float, optional): The step; None: ``step_ratio`` times
            eps (1 at eps 0).
        step_ratio (float, optional): The step as a fraction of eps.
        random_start, adaptive, labels, seed: :class:`Attack`'s fields.

    Returns:
        list[Attack]: The cells, each checked.

    Raises:
        AnalysisError: A cell that cannot run.
    """
    cells: List[Attack] = []
    for name in attacks:
        for n in steps:
            for eps in epsilons:
                step = step_size or step_ratio * eps or 1.
                cell = Attack(name, norm, eps, n, step, random_start, adaptive,
                              labels, seed)
                if cell not in cells:
                    cells.append(cell)
    return cells


def attack_settings(norm: str, step_size: Optional[float],
                    step_ratio: Optional[float], random_start: bool,
                    labels: str) -> Dict:
    """What attack cells depend on beyond their keys (the store refuses a
    rerun under other settings)."""
    return dict(
        threat='attack',
        norm=norm,
        step_size=step_size,
        step_ratio=step_ratio,
        random_start=random_start,
        labels=labels)


def model_cells(elliptical: Dict[str, bool], plain: Sequence[Attack],
                adaptive: Sequence[Attack]) -> Dict[str, List]:
    """Each model's cells: the clean one, ``plain``, then ``adaptive`` when
    the model has elliptical layers (``{name: has them}``)."""
    return {
        name: [(None, None), *plain, *(adaptive if has else [])]
        for name, has in elliptical.items()
    }


ATTACK_PROTOCOLS: Dict[str, AttackProtocol] = {
    'default':
    AttackProtocol(('pgd', 'segpgd', 'cospgd'), 'linf',
                   (0.25, 0.5, 1, 2, 4, 8), 20, 2.55, None, 'gt',
                   'PGD, SegPGD and CosPGD, L-inf, 20 steps of 2.55 levels '
                   '(0.01 of the range)'),
    'paper':
    AttackProtocol(
        ('fgsm', 'pgd'), 'linf', (1, 2, 3, 4, 5, 6), 20, None, 0.15,
        'prediction', 'the authors\' ImageNet recipe: FGM and PGD-20 with '
        'step 0.15 eps, eps 1-6 levels, labels from the clean prediction'),
    'quick':
    AttackProtocol(('pgd', 'segpgd', 'apgd-mce'), 'linf', (1, 4), 5, 1., None,
                   'gt', 'a first look: PGD and SegPGD, 5 steps of 1 level, '
                   'and APGD-MCE, 5 iterations, eps 1 and 4'),
    'sea':
    AttackProtocol(
        SEA_ATTACKS, 'linf', (0.25, 0.5, 1, 2), 300, None, 0.25, 'gt',
        'SEA (Croce, Singh and Hein, ECCV 2024) for normally trained models: '
        'APGD with the MCE, MCE-Bal and JS losses, 300 iterations each, eps '
        '0.25-2 levels'),
    'sea-robust':
    AttackProtocol(
        SEA_ATTACKS, 'linf', (4, 8, 12), 300, None, 0.25, 'gt',
        'SEA for adversarially trained models: the three APGD losses, 300 '
        'iterations each, eps 4, 8 and 12 levels'),
}
