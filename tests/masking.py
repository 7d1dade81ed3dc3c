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

and, partial or subtler masking (issue 54):

* rounds the input and adds a fine ripple (:class:`ShatteringPreProcessor`):
  every gradient is nonzero, but its sign flips with each pixel's level;
* rounds only a subset of the images, chosen by path
  (:class:`SubsetQuantisingPreProcessor`);
* shifts the image by a random offset at every call
  (:class:`ShiftingPreProcessor`), or shifts it and its logits back
  (:class:`RandomShiftEncoderDecoder`);
* scales the logits by a temperature that saturates the softmax
  (:class:`HotEncoderDecoder`): the cross-entropy's gradient underflows;
* passes the input on unchanged with its gradient negated
  (:class:`ReversingPreProcessor`, issue 63): every white-box step lowers
  the loss, an attack that helps the model.

Importing this module registers them in mmseg's ``MODELS``; a config takes
one with ``model.data_preprocessor.type`` (``model.type``: the hot model).
The self-tests read a model's own cells with :func:`correct_pixels` and
audit them with :func:`audit_of_counts`.
"""
import math
import zlib
from typing import Dict, Optional, Sequence

import numpy as np
import torch
from mmseg.models import EncoderDecoder, SegDataPreProcessor
from mmseg.registry import MODELS

from mmseg_elliptical.robustness.attacks.pgd import seg_logits
from mmseg_elliptical.robustness.audit.verdict import gradient_masking_audit


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


@MODELS.register_module(force=True)
class ShatteringPreProcessor(SegDataPreProcessor):
    """mmseg's preprocessor after rounding the input to multiples of
    ``step`` levels and adding ``ripple * sin(2 pi x / period)``: a
    gradient that is never 0 but whose sign follows each pixel's level, not
    the model.

    Args:
        step (float): The grid's spacing in 0-255 levels.
        ripple (float): The ripple's amplitude in levels.
        period (float): Its period in levels.
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def __init__(self,
                 step: float = 32.,
                 ripple: float = 0.5,
                 period: float = 1.,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.step, self.ripple, self.period = step, ripple, period

    def forward(self, data: Dict, training: bool = False) -> Dict:
        inputs = [
            torch.round(x.float() / self.step) * self.step +
            self.ripple * torch.sin(2 * math.pi * x.float() / self.period)
            for x in data['inputs']
        ]
        return super().forward(dict(data, inputs=inputs), training)


def masked_path(path: str, share: float) -> bool:
    """Whether an image (by path) is in the masked subset of ``share``."""
    return zlib.crc32(str(path).encode()) % 1000 < 1000 * share


@MODELS.register_module(force=True)
class SubsetQuantisingPreProcessor(SegDataPreProcessor):
    """:class:`QuantisingPreProcessor` on the images whose path falls in a
    fixed subset of about ``share`` of them (:func:`masked_path`); the rest
    pass as they are.

    Args:
        step (float): The grid's spacing in 0-255 levels.
        share (float): The share of images rounded.
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def __init__(self,
                 step: float = 32.,
                 share: float = 0.3,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.step, self.share = step, share

    def forward(self, data: Dict, training: bool = False) -> Dict:
        samples = data.get('data_samples') or [None] * len(data['inputs'])
        inputs = [
            torch.round(x.float() / self.step) * self.step if s is not None
            and masked_path(s.metainfo.get('img_path', ''), self.share) else
            x.float() for x, s in zip(data['inputs'], samples)
        ]
        return super().forward(dict(data, inputs=inputs), training)


@MODELS.register_module(force=True)
class ShiftingPreProcessor(SegDataPreProcessor):
    """mmseg's preprocessor after rolling each image by a random offset of
    up to ``shift`` pixels in each direction, drawn afresh at every call
    (seeded once).

    Args:
        shift (int): The largest offset in pixels.
        seed (int): Seed of the preprocessor's own generator.
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def __init__(self, shift: int = 8, seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shift = shift
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, data: Dict, training: bool = False) -> Dict:
        inputs = []
        for x in data['inputs']:
            dy, dx = torch.randint(
                -self.shift, self.shift + 1, (2, ),
                generator=self.generator).tolist()
            inputs.append(torch.roll(x.float(), (dy, dx), dims=(-2, -1)))
        return super().forward(dict(data, inputs=inputs), training)


@MODELS.register_module(force=True)
class RandomShiftEncoderDecoder(EncoderDecoder):
    """mmseg's ``EncoderDecoder`` that rolls each normalised image by a
    random offset of up to ``shift`` pixels in each direction, drawn afresh
    at every call (seeded once), and rolls its logits back: a randomised
    defence whose prediction stays aligned with the labels (a ViT's patch
    grid sees another crop at each draw).

    Args:
        shift (int): The largest offset in pixels.
        seed (int): Seed of the model's own generator.
        **kwargs: ``EncoderDecoder``'s arguments.
    """

    def __init__(self, shift: int = 4, seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shift = shift
        self.generator = torch.Generator().manual_seed(seed)

    def encode_decode(self, inputs, batch_img_metas):
        offsets = torch.randint(
            -self.shift,
            self.shift + 1, (len(inputs), 2),
            generator=self.generator).tolist()
        rolled = torch.stack([
            torch.roll(x, (dy, dx), dims=(-2, -1))
            for x, (dy, dx) in zip(inputs, offsets)
        ])
        logits = super().encode_decode(rolled, batch_img_metas)
        return torch.stack([
            torch.roll(lg, (-dy, -dx), dims=(-2, -1))
            for lg, (dy, dx) in zip(logits, offsets)
        ])


@MODELS.register_module(force=True)
class HotEncoderDecoder(EncoderDecoder):
    """mmseg's ``EncoderDecoder`` with its logits times ``temperature``:
    the same predictions, a softmax saturated to one-hot in float32.

    Args:
        temperature (float): The logits' factor.
        **kwargs: ``EncoderDecoder``'s arguments.
    """

    def __init__(self, temperature: float = 1e4, **kwargs) -> None:
        super().__init__(**kwargs)
        self.temperature = temperature

    def encode_decode(self, inputs, batch_img_metas):
        return self.temperature * super().encode_decode(
            inputs, batch_img_metas)


@MODELS.register_module(force=True)
class ReversingPreProcessor(SegDataPreProcessor):
    """mmseg's preprocessor on the input as it is, whose gradient with
    respect to the input is negated (``2 x.detach() - x``): the same
    predictions, and a white-box attack that ascends the loss descends it.

    Args:
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def forward(self, data: Dict, training: bool = False) -> Dict:
        inputs = [2 * x.float().detach() - x.float() for x in data['inputs']]
        return super().forward(dict(data, inputs=inputs), training)


def correct_pixels(model,
                   xs,
                   samples,
                   labels: Optional[Sequence] = None) -> np.ndarray:
    """Correctly labelled pixels per image of ``model`` at ``xs`` (one draw
    of a random model); ``labels`` default to the samples' own, 255 is
    unlabelled."""
    with torch.no_grad():
        logits = seg_logits(model, xs, samples)
    if labels is None:
        labels = [s.gt_sem_seg.data[0] for s in samples]
    return np.array([
        int(((lg.argmax(0) == y) & (y != 255)).sum())
        for lg, y in zip(logits, labels)
    ])


def audit_of_counts(right: Dict[str, np.ndarray], labelled: np.ndarray,
                    epsilons: Sequence[float], **kwargs) -> Dict:
    """The audit of a model's own cells (no budget cells) from their
    correct pixels per image, ``{cell key: counts}``, and each image's
    ``labelled`` pixels; ``kwargs`` go to ``gradient_masking_audit``."""
    cells = {
        k: dict(aAcc=100 * v.sum() / labelled.sum())
        for k, v in right.items()
    }
    return gradient_masking_audit(
        cells,
        lambda k: (right[k], labelled),
        epsilons,
        False,
        budget=[],
        **kwargs)
