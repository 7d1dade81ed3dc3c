"""SegFormer's Mix Transformer (MiT) with elliptical attention."""
from typing import List, Sequence

import torch.nn as nn
from mmseg.models.backbones import MixVisionTransformer
from mmseg.models.backbones.mit import TransformerEncoderLayer
from mmseg.registry import MODELS

from ..chain import EllipticalLayerMixin
from ..conversion import register_elliptical_version
from ..transformer import (EllipticalTransformerMixin, TokenLayout,
                           reduced_token_layouts)


@register_elliptical_version(TransformerEncoderLayer)
class EllipticalMiTLayer(EllipticalLayerMixin, TransformerEncoderLayer):
    """MiT's encoder layer (spatial-reduction attention, MixFFN) in a chain."""


@MODELS.register_module()
@register_elliptical_version(MixVisionTransformer)
class EllipticalMixVisionTransformer(EllipticalTransformerMixin,
                                     MixVisionTransformer):
    """mmseg's ``MixVisionTransformer`` (SegFormer) with elliptical attention.

    Inside each stage, block j >= 1 scores with ``m`` from the values of
    blocks j and j - 1 over the spatially reduced key/value tokens; block 0 of
    each stage stays dot-product (the previous stage has other tokens and
    channels). Same parameters and state-dict keys as mmseg's class.

    Args:
        elliptical_layers (Sequence[int], optional): Global block indices
            (0-based, in forward order across stages). Defaults to None:
            every block but the first of each stage.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of ``MixVisionTransformer``.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return [stage[1] for stage in self.layers]

    def token_layout(self) -> List[TokenLayout]:
        return reduced_token_layouts(
            [stage[0].projection.stride for stage in self.layers],
            [stage[1][0].attn.sr_ratio for stage in self.layers])
