"""mmseg's VisionTransformer with elliptical attention (Segmenter, SETR,
UPerNet, DPT)."""
from typing import List, Sequence

import torch.nn as nn
from mmseg.models.backbones import VisionTransformer
from mmseg.models.backbones.vit import TransformerEncoderLayer
from mmseg.registry import MODELS

from ..chain import EllipticalLayerMixin
from ..conversion import register_elliptical_version
from ..transformer import EllipticalTransformerMixin, TokenLayout, patch_grid


@register_elliptical_version(TransformerEncoderLayer)
class EllipticalViTLayer(EllipticalLayerMixin, TransformerEncoderLayer):
    """mmseg's ViT encoder layer (also the Segmenter head's) in a chain."""


@MODELS.register_module()
@register_elliptical_version(VisionTransformer)
class EllipticalVisionTransformer(EllipticalTransformerMixin,
                                  VisionTransformer):
    """mmseg's ``VisionTransformer`` with elliptical attention.

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return [self.layers]

    def token_layout(self) -> List[TokenLayout]:
        return [
            TokenLayout(
                grid=patch_grid(self.patch_embed),
                stride=tuple(self.patch_embed.projection.stride),
                prefix=int(self.with_cls_token))
        ]
