"""What the elliptical MaskFormer and Mask2Former heads share: the query
self-attention of the decoder layers is the chain (docs/models.md)."""
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
from mmseg.models.decode_heads.decode_head import BaseDecodeHead
from torch import Tensor

from ..checks import InputError, check_kwargs, init_keywords, looks_at_values
from ..transformer import EllipticalTransformerMixin
from .mmdet_extra import MMDET_AVAILABLE, require_mmdet

if MMDET_AVAILABLE:
    # needs mmdet (optional); registers its decoder layers
    from . import mmdet_layers  # noqa: F401  (mmdet)


class EllipticalQueryDecoderMixin(EllipticalTransformerMixin):
    """The elliptical version of an mmseg head built on mmdet's.

    Args:
        **kwargs: Arguments of the mmseg head and of
            :class:`~..transformer.EllipticalTransformerMixin` (over decoder
            layers).
    """

    def __init__(self, **kwargs) -> None:
        channels = kwargs.get('in_channels')
        super().__init__(**kwargs)
        self.feature_channels: Optional[List[int]] = None if channels is None \
            else [int(c) for c in channels]

    @classmethod
    def check_arguments(cls, kwargs: dict) -> None:
        """Raise the install hint without mmdet; reject keywords no
        ``__init__`` of the head names (mmdet's heads drop unknown ones
        silently)."""
        require_mmdet(cls.__name__)
        names, _ = init_keywords(cls.mmseg_class(), whole_mro=True)
        check_kwargs(cls, BaseDecodeHead, kwargs, [*cls.OWN_ARGS, *names])

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return [self.transformer_decoder.layers]

    def input_channels(self) -> Optional[int]:
        return None  # features of several levels: see check_inputs

    def check_inputs(self, inputs) -> None:
        """Reject features that are not one ``[B, C_i, H_i, W_i]`` map per
        level of ``in_channels``, or non-finite ones."""
        owner = type(self).__name__
        if not isinstance(inputs, (list, tuple)) or not all(
                isinstance(x, Tensor) and x.dim() == 4
                and x.is_floating_point() for x in inputs):
            raise InputError(
                f'{owner} expects the backbone\'s feature maps, a list of '
                f'float tensors [B, C, H, W], got {_describe(inputs)}.')
        channels = [x.shape[1] for x in inputs]
        expected = getattr(self, 'feature_channels', None)
        if expected is not None and channels != expected:
            raise InputError(
                f'{owner}: in_channels={expected} but the feature maps have '
                f'{channels} channels; set decode_head.in_channels to the '
                'backbone\'s output channels.')
        bad = [
            i for i, x in enumerate(inputs)
            if looks_at_values(x, self.check_finite)
            and not torch.isfinite(x).all()
        ]
        if bad:
            raise InputError(
                f'{owner}: the backbone\'s feature maps {bad} contain NaN or '
                'infinite values; check the backbone and the input (e.g. fp16 '
                "overflow), or set decode_head.check_finite='never'.")


def _describe(inputs) -> str:
    if isinstance(inputs, (list, tuple)):
        return '[' + ', '.join(_describe(x) for x in inputs) + ']'
    if isinstance(inputs, Tensor):
        return f'{inputs.dtype} tensor of shape {tuple(inputs.shape)}'
    return type(inputs).__name__
