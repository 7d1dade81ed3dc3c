"""mmseg's BEiT backbone with elliptical attention."""
from typing import List, Sequence

import torch.nn as nn
from mmseg.models.backbones import BEiT
from mmseg.models.backbones.beit import BEiTTransformerEncoderLayer
from mmseg.registry import MODELS

from ..chain import EllipticalLayerMixin
from ..checks import InputError
from ..conversion import register_elliptical_version
from ..transformer import EllipticalTransformerMixin, TokenLayout, patch_grid


@register_elliptical_version(BEiTTransformerEncoderLayer)
class EllipticalBEiTLayer(EllipticalLayerMixin, BEiTTransformerEncoderLayer):
    """BEiT's encoder layer (layer scale kept) in a chain."""


@MODELS.register_module()
@register_elliptical_version(BEiT)
class EllipticalBEiT(EllipticalTransformerMixin, BEiT):
    """mmseg's ``BEiT`` with elliptical attention; the input must have
    ``img_size``'s patch grid (mmseg sizes the relative position tables from
    it).

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
                prefix=1)
        ]

    def check_inputs(self, inputs) -> None:
        """Also reject images whose patch grid is not ``img_size``'s."""
        super().check_inputs(inputs)
        grid = tuple(s // self.patch_size for s in inputs.shape[-2:])
        if grid != tuple(self.patch_shape):
            raise InputError(
                f'{type(self).__name__} was built for img_size='
                f'{tuple(self.img_size)} (a {self.patch_shape[0]}x'
                f'{self.patch_shape[1]} patch grid, which sizes its '
                'relative position tables and MAE\'s position embedding), '
                'got images of '
                f'{tuple(inputs.shape[-2:])} ({grid[0]}x{grid[1]} patches); '
                'set img_size to the crop size and test with '
                "test_cfg=dict(mode='slide') at that crop size.")
