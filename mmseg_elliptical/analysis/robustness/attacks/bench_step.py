"""The APGD-MCE step the benchmark times (its ``attack-apgd`` mode,
:mod:`mmseg_elliptical.benchmark.apgd_step`): a short run of the grid's own
:func:`.apgd.apgd`, registered with the benchmark on import."""
from typing import Callable, ContextManager, List, Sequence

import torch
from torch import Tensor

from ....benchmark.apgd_step import (APGD_EPS, APGD_NAME, APGD_NORM, MID,
                                     SCALE, attacked_logits,
                                     register_apgd_step)
from ....utils.attack_cells import check_apgd_steps as check_steps
from .apgd import apgd


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


register_apgd_step(ApgdStep, check_steps)
