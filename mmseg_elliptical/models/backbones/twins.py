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

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return list(self.layers)

    def token_layout(self) -> List[TokenLayout]:
        return reduced_token_layouts(
            [embed.projection.stride for embed in self.patch_embeds],
            [stage[0].attn.sr_ratio for stage in self.layers])
