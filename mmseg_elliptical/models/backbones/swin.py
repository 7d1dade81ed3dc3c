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

    Inside each stage, block j >= 1 scores with ``m`` estimated per image
    and head from the values of blocks j and j - 1 over all real tokens of
    the stage's feature map, compared at the same image position whatever
    the window shifts, and used in every window of the image
    (:class:`~..attention.EllipticalShiftWindowMSA`). Block 0 of each stage
    stays dot-product (patch merging changes tokens and channels). Same
    parameters and state-dict keys as mmseg's class.

    Args:
        elliptical_layers (Sequence[int], optional): Global block indices
            (0-based, in forward order across stages; Swin-T's
            ``depths=(2, 2, 6, 2)`` has blocks 0..11, stage starts 0, 2, 4,
            10). Defaults to None: every block but the first of each stage.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of ``SwinTransformer``.
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
