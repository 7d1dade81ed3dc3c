"""Elliptical versions of BEiT's and MAE's attention."""
from typing import Optional

import torch
from mmseg.models.backbones.beit import BEiTAttention
from mmseg.models.backbones.mae import MAEAttention
from mmseg.registry import MODELS
from torch import Tensor

from ..conversion import register_elliptical_version
from .core import EllipticalAttentionMixin
from .utils import relative_position_bias


@MODELS.register_module()
@register_elliptical_version(BEiTAttention)
class EllipticalBEiTAttention(EllipticalAttentionMixin, BEiTAttention):
    """mmseg's ``BEiTAttention`` with elliptical scores (arguments of
    mmseg's class and of :class:`~.core.EllipticalAttentionMixin`)."""

    def packed_qkv_bias(self) -> Optional[Tensor]:
        """The ``[3C]`` qkv bias mmseg uses (``q_bias``, zeros, ``v_bias``
        for ``bias='qv_bias'``), or None."""
        if self.bias == 'qv_bias':
            return torch.cat(
                (self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
        return self.qkv.bias

    def relative_position_bias(self) -> Optional[Tensor]:
        """The relative position bias ``[H, N, N]``
        (:func:`~.utils.relative_position_bias`), or None."""
        if self.relative_position_bias_table is None:
            return None
        return relative_position_bias(self.relative_position_bias_table,
                                      self.relative_position_index)

    def forward(self, x: Tensor) -> Tensor:
        """Self-attention over tokens ``[B, N, C]`` (no shortcut)."""
        B, N, C = x.shape
        q, k, v, m = self.project(x, x, self.qkv.weight,
                                  self.packed_qkv_bias())
        bias = self.relative_position_bias()
        out = self.attend(
            q,
            k,
            v,
            m,
            bias=None if bias is None else bias[None],
            dropout_p=self.attn_drop.p,
            scale=self.scale)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(B, N, C)))


@MODELS.register_module()
@register_elliptical_version(MAEAttention)
class EllipticalMAEAttention(EllipticalBEiTAttention, MAEAttention):
    """mmseg's ``MAEAttention`` (BEiT's, zero-initialised relative position
    table) with elliptical scores."""
