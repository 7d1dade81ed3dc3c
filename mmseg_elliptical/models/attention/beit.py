"""Elliptical versions of BEiT's and MAE's attention.

Global attention over the cls token and the patch tokens, as in the ViT, with
BEiT's relative position bias (cls rows included) added to the scores, its
``q_bias`` / ``v_bias`` (a zero key bias) or MAE's plain qkv bias, and its
``qk_scale``. The layer scale ``gamma_1`` / ``gamma_2`` lives in the layer,
whose forward stays mmseg's.
"""
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
    """mmseg's ``BEiTAttention`` with elliptical scores.

    Same parameters (``qkv``, ``q_bias``, ``v_bias``,
    ``relative_position_bias_table``, ``proj``) and arguments as mmseg's
    class, plus ``elliptical``, ``relevance_reduction`` and
    ``relevance_eps`` (see :class:`~.utils.AttentionOptions`).

    The relative position bias reaches ``scaled_dot_product_attention`` as
    ``attn_mask``; PyTorch's CPU kernel runs without the N x N scores when
    the mask needs no gradient (inference); in training it falls back to its
    math kernel, which materialises them as mmseg's ``BEiTAttention`` does
    (or, for few tokens, the explicit path runs: see
    :meth:`~.policy.KernelPolicy.fused_kernel`).
    """

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
        """Self-attention over ``x`` (no shortcut: the layer adds it).

        Args:
            x (Tensor): Normalised tokens ``[B, N, C]``, cls token first.

        Returns:
            Tensor: ``[B, N, C]``.
        """
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
