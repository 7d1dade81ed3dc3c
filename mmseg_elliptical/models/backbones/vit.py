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
    """mmseg's ``VisionTransformer`` whose layers use elliptical attention.

    Accepts every argument of ``VisionTransformer`` and has the same
    parameters and state-dict keys, so mmseg ViT checkpoints load in both
    directions. Layer 0 has no previous values and stays dot-product; with
    ``elliptical_layers=[]`` it computes what ``VisionTransformer`` computes.

    Args:
        elliptical_layers (Sequence[int], optional): Layers that score
            elliptically. Defaults to None: layers ``1 .. num_layers - 1``.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of ``mmseg.models.backbones.VisionTransformer``.
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
