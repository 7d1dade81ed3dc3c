"""Attacks: PGD, SegPGD, CosPGD, FGSM, APGD and their losses, Square,
transfer, class weights; one code for evaluation and training."""
from ....utils.attack_cells import ATTACKS, LABELS, NORMS, PERTURBERS, Attack
from . import bench_step  # noqa: F401 (registers the benchmark's APGD step)
from .pgd import AdversarialTestLoop, perturb

__all__ = [
    'ATTACKS', 'LABELS', 'NORMS', 'PERTURBERS', 'AdversarialTestLoop',
    'Attack', 'perturb'
]
