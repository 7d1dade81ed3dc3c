"""mmseg's Swin Transformer with elliptical (shifted) window attention."""
from typing import List, Sequence

import torch.nn as nn
from mmseg.models.backbones import SwinTransformer
from mmseg.models.backbones.swin import SwinBlock
from mmseg.registry import MODELS

from ..chain import EllipticalLayerMixin
from ..conversion import register_elliptical_version
from ..transformer import (EllipticalTransformerMixin, TokenLayout,
                           stage_strides)


@register_elliptical_version(SwinBlock)
class EllipticalSwinBlock(EllipticalLayerMixin, SwinBlock):
    """Swin's block (W-MSA or SW-MSA, FFN) in a chain."""


@MODELS.register_module()
@register_elliptical_version(SwinTransformer)
class EllipticalSwinTransformer(EllipticalTransformerMixin, SwinTransformer):
    """mmseg's ``SwinTransformer`` with elliptical window attention.

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return [stage.blocks for stage in self.stages]

    def token_layout(self) -> List[TokenLayout]:
        steps = [self.patch_embed.projection.stride] + [
            stage.downsample.sampler.stride for stage in self.stages[:-1]
        ]
        return [
            TokenLayout(grid='argument', stride=stride, keys='windows')
            for stride in stage_strides(steps)
        ]
