"""The benchmark's APGD mode (``attack-apgd``): a short run of the grid's own
APGD-MCE (:func:`mmseg_elliptical.robustness.attacks.apgd.apgd`) timed per
iteration beside PGD's attack step, and its rows over PGD's
(docs/benchmark.md)."""
from typing import Callable, ContextManager, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from ..robustness.attacks.apgd import apgd
from ..robustness.attacks.cells import check_apgd_steps as check_steps
from .timing import mode_ratios

APGD_MODE = 'attack-apgd'
#: The attack timed: SEA's masked cross-entropy, L-inf, its red-eps stages.
APGD_NAME, APGD_NORM = 'apgd-mce', 'linf'
#: Its radius in 0-255 levels (the stages run at 2, 1.5 and 1 times it).
APGD_EPS = 4.
#: The benchmark's inputs are standard normal: pixels = input x SCALE + MID.
SCALE, MID = 32., 127.5


def check_apgd_steps(steps: int) -> None:
    """Raise ValueError unless ``steps`` gives each L-inf stage one
    iteration (0: no APGD mode)."""
    if steps:
        check_steps(steps)


def apgd_step(runner: Callable, x: Tensor, steps: int,
              autocast: ContextManager) -> Callable:
    """The APGD step on batch ``x`` (:class:`ApgdStep`)."""
    return ApgdStep(runner, x, steps, autocast)


def attacked_logits(out) -> Optional[Tensor]:
    """The last 4-D ``[B, C, h, w]`` tensor of a (nested) model output: a
    segmentor's logits, a backbone's last feature map (its channels taken
    as classes), Mask2Former's last mask prediction."""
    if isinstance(out, Tensor):
        return out if out.dim() == 4 else None
    found = [attacked_logits(o) for o in out]
    found = [t for t in found if t is not None]
    return found[-1] if found else None


def per_iteration(stats: Dict, iterations: int) -> Dict:
    """``time_stats``' fields of a whole APGD run per iteration, with
    ``iterations``."""
    times = ('times_ms', 'round_ms', 'median_ms', 'iqr_ms')
    out = {
        k: [t / iterations
            for t in v] if isinstance(v, list) else v / iterations
        for k, v in stats.items() if k in times
    }
    return dict(
        stats,
        **out,
        images_per_s=stats['images_per_s'] * iterations,
        iterations=iterations)


def apgd_ratios(results: Sequence[Dict]) -> List[Dict]:
    """APGD-MCE iteration / PGD's attack step of each model and size
    (:func:`~.timing.mode_ratios`), with both times."""
    return mode_ratios(
        results, APGD_MODE, lambda r, base: dict(
            iterations=r['iterations'],
            apgd_ms=r['median_ms'],
            pgd_ms=base['median_ms']))


class ApgdStep:
    """One short APGD-MCE run on a batch, as the grid runs it: its forward
    is the benchmarked model's, its labels the clean prediction, its start
    a fixed point of the eps ball (seeded), so every call does the same work.

    Args:
        runner (callable): The benchmarked forward (model or compiled).
        x (Tensor): The ``[B, 3, H, W]`` standard-normal input batch.
        steps (int): APGD's iterations (>= 4).
        autocast (ContextManager): The step's autocast context.
        seed (int): Seed of the start.

    Attributes:
        iterations (int): Forwards with an input gradient in the last call
            (``steps`` unless every image reached 0 accuracy first): what a
            call's time is divided by.
    """

    def __init__(self,
                 runner: Callable,
                 x: Tensor,
                 steps: int,
                 autocast: ContextManager,
                 seed: int = 0) -> None:
        check_steps(steps)
        self.runner, self.steps, self.autocast = runner, steps, autocast
        self.x0 = list((x.detach() * SCALE + MID).clamp(0, 255))
        gen = torch.Generator().manual_seed(seed)
        self.noise = [(torch.rand(t.shape, generator=gen) * 2 - 1).to(t)
                      for t in self.x0]
        self.iterations = 0
        with torch.no_grad():
            self.labels = [lg.argmax(0) for lg in self.forward(self.x0)]

    def forward(self, xs: Sequence[Tensor]) -> List[Tensor]:
        """0-255 images to the ``[C, h, w]`` logits APGD attacks."""
        self.iterations += torch.is_grad_enabled()
        with self.autocast:
            out = self.runner((torch.stack(list(xs)) - MID) / SCALE)
        return list(attacked_logits(out).float())

    def start(self, j: int, radius: float) -> Tensor:
        """Image ``j``'s start in the ball of ``radius`` (APGD projects it
        onto [0, 255])."""
        return self.x0[j] + radius * self.noise[j]

    def __call__(self) -> Tensor:
        """Run APGD; return the ``[B, 3, H, W]`` adversarial images."""
        self.iterations = 0
        xs, _ = apgd(self.forward, self.x0, self.labels, self.start, APGD_NAME,
                     APGD_NORM, APGD_EPS, self.steps)
        return torch.stack(xs)
