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

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return [stage[1] for stage in self.layers]

    def token_layout(self) -> List[TokenLayout]:
        return reduced_token_layouts(
            [stage[0].projection.stride for stage in self.layers],
            [stage[1][0].attn.sr_ratio for stage in self.layers])
