"""Models that mask their gradients on purpose, for the self-test of the
gradient-masking audit (test helpers, not package features): the same
checkpoint behind a data preprocessor that

* rounds the 0-255 input to a coarse grid before normalising it
  (:class:`QuantisingPreProcessor`): ``torch.round`` has a zero gradient
  everywhere, so every input gradient is 0 and no white-box attack moves
  (Athalye et al. 2018's shattered gradients);
* adds fresh uniform noise to the input at every call
  (:class:`RandomisingPreProcessor`): the gradients an attack sees are of
  one random draw and the evaluation another, with no expectation over the
  transformation (EOT).

Importing this module registers both in mmseg's ``MODELS``; a config takes
one with ``model.data_preprocessor.type``.
"""
from typing import Dict

import torch
from mmseg.models import SegDataPreProcessor
from mmseg.registry import MODELS


@MODELS.register_module(force=True)
class QuantisingPreProcessor(SegDataPreProcessor):
    """mmseg's preprocessor after rounding the input to multiples of
    ``step`` levels.

    Args:
        step (float): The grid's spacing in 0-255 levels.
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def __init__(self, step: float = 32., **kwargs) -> None:
        super().__init__(**kwargs)
        self.step = step

    def forward(self, data: Dict, training: bool = False) -> Dict:
        inputs = [
            torch.round(x.float() / self.step) * self.step
            for x in data['inputs']
        ]
        return super().forward(dict(data, inputs=inputs), training)


@MODELS.register_module(force=True)
class RandomisingPreProcessor(SegDataPreProcessor):
    """mmseg's preprocessor after adding uniform noise of +-``noise``
    levels, drawn afresh at every call (seeded once).

    Args:
        noise (float): The noise's half-width in 0-255 levels.
        seed (int): Seed of the preprocessor's own generator.
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def __init__(self, noise: float = 24., seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.noise = noise
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, data: Dict, training: bool = False) -> Dict:
        inputs = [
            x.float() + (torch.rand(x.shape, generator=self.generator) * 2 -
                         1).to(x.device) * self.noise for x in data['inputs']
        ]
        return super().forward(dict(data, inputs=inputs), training)
