"""Which cells a certification grid runs: the cell
(:class:`Certification`) and its checks (no torch: the tools check these
before the heavy imports; the sampling lives in
:mod:`mmseg_elliptical.robustness.certification.smoothing`)."""
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Dict, List, Sequence, Tuple

from ...errors import AnalysisError

#: The multiple-testing corrections over an image's pixels.
CORRECTIONS = ('holm', 'bonferroni')


@dataclass(frozen=True)
class Certification:
    """One certification cell: SegCertify at one noise level and threshold.

    Attributes:
        sigma (float): Noise standard deviation on the 0-1 image scale.
        tau (float): The top class's probability to certify, in (0.5, 1).
        correction (str): ``'holm'`` or ``'bonferroni'``, over an image's
            pixels.
        n0 (int): Draws that pick each pixel's class.
        n (int): Further draws that count it.
        alpha (float): Family-wise error rate per image.
        seed (int): Seed of the draws (with each image's key).
        batch (int): Noisy copies per forward pass (the results do not
            depend on it).
    """
    sigma: float
    tau: float
    correction: str = 'holm'
    n0: int = 10
    n: int = 100
    alpha: float = 0.001
    seed: int = 0
    batch: int = field(default=32, compare=False)

    def __post_init__(self) -> None:
        check_certification(self)

    @property
    def key(self) -> str:
        """The cell key ``certify/SIGMA/TAU/CORRECTION``."""
        return f'certify/{self.sigma:g}/{self.tau:g}/{self.correction}'

    @property
    def radius(self) -> float:
        """The certified L2 radius (0-1 scale): ``sigma * Phi^-1(tau)``."""
        return self.sigma * NormalDist().inv_cdf(self.tau)

    @property
    def draws(self) -> Tuple:
        """What the noisy samples depend on: cells that share it share
        their samples."""
        return (self.sigma, self.n0, self.n, self.seed)

    def to_dict(self) -> Dict:
        return asdict(self)


def check_certification(cell: Certification) -> None:
    """Raise :class:`AnalysisError` for a cell that cannot run."""
    problems = []
    if not cell.sigma > 0:
        problems.append(f'sigma {cell.sigma} must be > 0 (0-1 scale)')
    if not 0.5 < cell.tau < 1:
        problems.append(f'tau {cell.tau} must lie in (0.5, 1)')
    if cell.correction not in CORRECTIONS:
        problems.append(
            f'correction {cell.correction!r} is none of {CORRECTIONS}')
    for name in ('n0', 'n', 'batch'):
        if getattr(cell, name) < 1:
            problems.append(f'{name} {getattr(cell, name)} must be >= 1')
    if not 0 < cell.alpha < 1:
        problems.append(f'alpha {cell.alpha} must lie in (0, 1)')
    if problems:
        raise AnalysisError('; '.join(problems) + '.')


def certification_cells(sigmas: Sequence[float],
                        taus: Sequence[float],
                        corrections: Sequence[str] = ('holm', ),
                        n0: int = 10,
                        n: int = 100,
                        alpha: float = 0.001,
                        seed: int = 0,
                        batch: int = 32) -> List[Certification]:
    """Every ``(sigma, tau, correction)`` cell once, sigma outermost (the
    cells of one sigma share their draws), each checked."""
    return list(
        dict.fromkeys(
            Certification(s, t, c, n0, n, alpha, seed, batch) for s in sigmas
            for t in taus for c in corrections))
