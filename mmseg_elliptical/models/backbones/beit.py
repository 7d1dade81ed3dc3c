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
    """mmseg's ``BEiT`` whose layers use elliptical attention.

    As :class:`~.EllipticalVisionTransformer`: ``m`` over all tokens (cls
    included), layer 0 dot-product, same parameters and state-dict keys as
    mmseg's class; the relative position bias, ``q_bias`` / ``v_bias`` and
    the layer scale are kept. mmseg sizes the relative position tables from
    ``img_size``, so the input must have that size's patch grid (a clear
    error otherwise). mmseg's BEiT takes no ``with_cp``.

    Args:
        elliptical_layers (Sequence[int], optional): Layers that score
            elliptically. Defaults to None: layers ``1 .. num_layers - 1``.
        relevance_reduction (str): ``'mean'`` (the paper) or ``'median'``.
        relevance_eps (float): Guard of the max-normalisation of ``m``.
        **kwargs: Arguments of mmseg's class.
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
