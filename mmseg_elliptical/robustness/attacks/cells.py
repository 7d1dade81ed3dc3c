"""Which cells an attack grid runs: the attacks' names, the cell
(:class:`Attack`) and its checks, the protocols and the audit's preset
(no torch: the tools check these before the heavy imports; the attacks
live in :mod:`mmseg_elliptical.robustness.attacks`)."""
from dataclasses import asdict, dataclass
from typing import ClassVar, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ...errors import AnalysisError

PGD_ATTACKS = ('pgd', 'segpgd', 'cospgd', 'fgsm')
#: The APGD attacks, one per loss (``attacks.losses.LOSSES``): SEA's
#: evaluation losses (its ``sea`` protocols' attacks), its training
#: attack's plain cross-entropy, and the DLR margin loss (saturated logits).
SEA_ATTACKS = ('apgd-mce', 'apgd-mce-bal', 'apgd-js')
APGD_ATTACKS = SEA_ATTACKS + ('apgd-ce', 'apgd-dlr')
ATTACKS = PGD_ATTACKS + APGD_ATTACKS
#: Attacks that read outputs only, each run by its own module (``square``),
#: which :func:`.pgd.perturb` calls.
QUERY_ATTACKS = ('square', )
NORMS = ('linf', 'l2')
LABELS = ('gt', 'prediction')
#: The fraction of the iterations in each of APGD's first red-eps stages.
SPLIT = 0.3
#: Each red-eps stage's radius, in eps.
RADII = (2., 1.5, 1.)


def stages(norm: str, eps: float, steps: int) -> List[Tuple[float, int]]:
    """``(radius, iterations)`` of each APGD stage."""
    if norm != 'linf':
        return [(eps, steps)]
    first = int(SPLIT * steps)
    return list(
        zip((r * eps for r in RADII), (first, first, steps - 2 * first)))


@dataclass(frozen=True)
class Attack:
    """One attack cell.

    Attributes:
        name (str): One of :data:`ATTACKS`.
        norm (str): ``'linf'`` (eps and step in 0-255 levels) or ``'l2'``
            (on the 0-1 scale).
        eps (float): Radius of the ball.
        steps (int): Gradient steps (FGSM: 1; APGD: its iterations).
        step_size (float): Step, in eps's unit (FGSM: eps; APGD: 2, its
            own: the first step is 2 x the stage's radius).
        random_start (bool): Start at a uniform point of the ball, seeded
            per image (FGSM: never; APGD: always).
        adaptive (bool): Differentiate through the relevance ``m`` too.
        labels (str): ``'gt'``, or ``'prediction'``: the clean prediction.
        seed (int): Seed of the random start.
        class_weights (tuple[float], optional): Per-class loss weights
            (``apgd-mce-bal``'s, from the training set).
        bpda (bool): Differentiate through the data preprocessor as if
            its own transform were the identity (Athalye et al.'s BPDA:
            the values are the model's, the gradient straight through).
        eot (int): Draws of the model's randomness whose logits each
            attack step averages (Athalye et al.'s EOT; 1: none).
        train (bool): A class attribute: APGD runs SEA's training attack
            (``apgd(train=True)``): True for the training hook's cells.
    """
    name: str
    norm: str
    eps: float
    steps: int
    step_size: float
    random_start: bool = False
    adaptive: bool = False
    labels: str = 'gt'
    seed: int = 0
    class_weights: Optional[Tuple[float, ...]] = None
    bpda: bool = False
    eot: int = 1
    train: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.name == 'fgsm':
            object.__setattr__(self, 'steps', 1)
            object.__setattr__(self, 'step_size', self.eps)
            object.__setattr__(self, 'random_start', False)
        if self.name in APGD_ATTACKS:
            object.__setattr__(self, 'step_size', 2.)
            object.__setattr__(self, 'random_start', True)
        if self.class_weights is not None:
            object.__setattr__(self, 'class_weights',
                               tuple(self.class_weights))
        check_attack(self)

    @property
    def key(self) -> str:
        """The cell key ``ATTACK[-adaptive][-bpda][-eotK]/NORM/EPS/STEPS``.
        """
        name = f'{self.name}-adaptive' if self.adaptive else self.name
        name += '-bpda' * self.bpda + f'-eot{self.eot}' * (self.eot > 1)
        return f'{name}/{self.norm}/{self.eps:g}/{self.steps}'

    def to_dict(self) -> Dict:
        return asdict(self)


def apgd_problems(attack: Attack) -> List[str]:
    """Why an APGD cell cannot run (empty when it can): an evaluation cell
    needs one iteration in each L-inf stage (a training one runs one)."""
    if attack.name in APGD_ATTACKS and attack.norm == 'linf' and \
            not attack.train and min(
            n for _, n in stages('linf', 1., attack.steps)) < 1:
        return [
            f'{attack.name} needs steps >= 4 for each of its 3 L-inf stages '
            f'(2 eps, 1.5 eps, eps) to get one, not {attack.steps}'
        ]
    return []


def check_attack(attack: Attack) -> None:
    """Raise :class:`AnalysisError` for an attack that cannot run."""
    problems = []
    names = ATTACKS + QUERY_ATTACKS
    if attack.name not in names:
        problems.append(f'attack {attack.name!r} is none of {names}')
    if attack.norm not in NORMS:
        problems.append(f'norm {attack.norm!r} is none of {NORMS}')
    if attack.labels not in LABELS:
        problems.append(f'labels {attack.labels!r} is none of {LABELS}')
    top = 255. if attack.norm == 'linf' else float('inf')
    if not 0 <= attack.eps <= top:
        problems.append(f'eps {attack.eps} is outside [0, {top:g}]')
    if attack.steps < 1:
        problems.append(f'steps {attack.steps} must be >= 1')
    if not attack.step_size > 0 and attack.eps > 0:
        problems.append(f'step size {attack.step_size} must be > 0')
    if attack.eot < 1:
        problems.append(f'eot {attack.eot} must be >= 1 (1: no average)')
    problems += apgd_problems(attack)
    if problems:
        raise AnalysisError('; '.join(problems) + '.')


def check_apgd_steps(steps: int) -> None:
    """Raise ValueError unless ``steps`` gives each L-inf stage one
    iteration (the benchmark's ``--apgd-steps``; 0: no APGD mode)."""
    if steps and min(n for _, n in stages('linf', 1., steps)) < 1:
        raise ValueError(f'apgd_steps={steps}: APGD-MCE needs >= 4 '
                         'iterations (one per L-inf stage), or 0 for none.')


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


class AuditPreset(NamedTuple):
    """The audit's own budget (``--audit``'s defaults).

    Attributes:
        sweep_attack (str): The attack swept from the largest headline eps
            to 255 levels (its adaptive form too where the run has one).
        sweep_steps (int): Its iterations at every swept eps.
        queries (int): The square attack's queries per image at each
            headline eps.
        margin_attack (str): The APGD of the margin loss run with
            ``sweep_steps`` iterations at the largest headline eps (its
            adaptive form too): a logit temperature that saturates the
            softmax leaves the cross-entropy's gradient 0, not the
            margin's.
    """
    sweep_attack: str = 'apgd-mce-bal'
    sweep_steps: int = 100
    queries: int = 1000
    margin_attack: str = 'apgd-dlr'


#: The preset: APGD-MCE-Bal, 100 iterations, swept to 255 levels, the square
#: attack with 1000 queries, APGD-DLR, transfers from the other arm
#: (docs/evidence.md).
AUDIT_PRESET = AuditPreset()
