"""Twins-PCPVT with elliptical attention."""
from typing import List, Sequence

import torch.nn as nn
from mmseg.models.backbones import PCPVT
from mmseg.models.backbones.twins import GSAEncoderLayer
from mmseg.registry import MODELS

from ..chain import EllipticalLayerMixin
from ..conversion import register_elliptical_version
from ..transformer import (EllipticalTransformerMixin, TokenLayout,
                           reduced_token_layouts)


@register_elliptical_version(GSAEncoderLayer)
class EllipticalGSAEncoderLayer(EllipticalLayerMixin, GSAEncoderLayer):
    """Twins' global sub-sampled attention layer in a chain."""


@MODELS.register_module()
@register_elliptical_version(PCPVT)
class EllipticalPCPVT(EllipticalTransformerMixin, PCPVT):
    """mmseg's ``PCPVT`` (Twins-PCPVT) with elliptical attention.

    Inside each stage, block j >= 1 scores with ``m`` from the values of
    blocks j and j - 1 over the sub-sampled key/value tokens (the position
    encoding after block 0 does not change the tokens' layout); block 0 of
    each stage stays dot-product. Same parameters and state-dict keys as
    mmseg's class. Twins-SVT is not supported: its consecutive layers
    alternate local windows and global sub-sampling, so they see different
    tokens.

    Args:
        elliptical_layers (Sequence[int], optional): Global block indices
            (0-based, in forward order across stages). Defaults to None:
            every block but the first of each stage.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of ``PCPVT``.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return list(self.layers)

    def token_layout(self) -> List[TokenLayout]:
        return reduced_token_layouts(
            [embed.projection.stride for embed in self.patch_embeds],
            [stage[0].attn.sr_ratio for stage in self.layers])
