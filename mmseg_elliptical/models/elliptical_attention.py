"""Elliptical attention: the relevance estimator and the attention, in one place.

Elliptical Attention (Nielsen et al., NeurIPS 2024, arXiv 2406.13770) replaces
the dot product ``q . k`` by the Mahalanobis-style product ``(q * m) . k``,
where ``m`` weights each head coordinate by how much the value vectors change
along it between consecutive layers::

    m_d = mean_n |v^l[n, d] - v^(l-1)[n, d]|      per image and head
    m   = m / max_d m_d                           (delta of the paper cancels)
    out = softmax((q * m) k^T / sqrt(d)) v

``m`` is a constant for autograd and there are no new parameters, so the module
keeps the parameter names of mmcv's ``MultiheadAttention`` (``attn.in_proj_weight``,
``attn.in_proj_bias``, ``attn.out_proj.weight``, ``attn.out_proj.bias``) and
every dot-product checkpoint loads unchanged. Because ``(q * m) . k`` is still
a dot product, the fused ``scaled_dot_product_attention`` computes it without
materialising the N x N score matrix.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks.drop import build_dropout
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmengine.model import BaseModule
from torch import Tensor

from mmseg.registry import MODELS

REDUCTIONS = ('mean', 'median')


def check_estimator_args(reduction: str, eps: float, owner: str = '') -> None:
    """Validate the estimator options, raising a ``ValueError`` that names them.

    Args:
        reduction (str): Reduction over tokens, one of ``REDUCTIONS``.
        eps (float): Guard of the max-normalisation, a finite number > 0.
        owner (str): Prefix naming the argument's owner in the message.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f'{owner}relevance_reduction={reduction!r} is not '
                         f'supported; choose one of {REDUCTIONS}.')
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) \
            or not 0 < eps < float('inf'):
        raise ValueError(f'{owner}relevance_eps={eps!r} must be a finite '
                         'number > 0 (e.g. 1e-6).')


@torch.no_grad()
def relevance(v: Tensor,
              v_prev: Tensor,
              reduction: str = 'mean',
              eps: float = 1e-6) -> Tensor:
    """Estimate the coordinate-wise relevance ``m`` of each head.

    Args:
        v (Tensor): Values of this layer, shape ``[B, H, N, d]``.
        v_prev (Tensor): Values of the previous layer, same shape.
        reduction (str): ``'mean'`` (the paper) or ``'median'`` (the authors'
            robust variant) of ``|v - v_prev|`` over the N tokens.
        eps (float): When ``max_d m_d <= eps`` (e.g. identical values) there is
            no evidence for any direction and ``m`` falls back to all ones,
            i.e. plain dot-product attention, instead of dividing by zero.

    Returns:
        Tensor: ``m`` of shape ``[B, H, 1, d]`` in ``[0, 1]`` with max 1 per
        image and head, in ``v.dtype``; computed without gradient.
    """
    if v.shape != v_prev.shape:
        raise ValueError(
            f'Elliptical attention needs the previous layer\'s values with '
            f'the same shape as this layer\'s, got {tuple(v_prev.shape)} and '
            f'{tuple(v.shape)}: both layers must see the same tokens and heads.')
    # One temporary (|v - v_prev|, computed in place) and one reduction that
    # accumulates in fp32 without an fp32 copy of its input.
    diff = torch.sub(v, v_prev).abs_()
    if reduction == 'mean':
        m = diff.mean(dim=-2, keepdim=True, dtype=torch.float32)
    else:
        m = diff.float().median(dim=-2, keepdim=True).values
    top = m.amax(dim=-1, keepdim=True)
    m = torch.where(top > eps, m / top.clamp_min(eps), 1.)
    return m.to(v.dtype)


@MODELS.register_module()
class EllipticalAttention(BaseModule):
    """Multi-head self-attention with elliptical (Mahalanobis) scores.

    A drop-in for mmcv's ``MultiheadAttention`` as mmseg's ViT uses it
    (self-attention, ``batch_first=True``, identity shortcut), with the same
    parameter names and initialisation. Called with the previous layer's
    values ``v_prev`` it scores ``(q * m) . k / sqrt(d)``; without them (the
    first layer, or ``elliptical=False``) it is dot-product attention. It
    always returns its own values for the next layer.

    Args:
        embed_dims (int): Embedding dimension C.
        num_heads (int): Number of heads H; ``C % H == 0``.
        attn_drop (float): Dropout on the attention probabilities.
            Defaults to 0.
        proj_drop (float): Dropout after the output projection. Defaults to 0.
        dropout_layer (dict, optional): Dropout on the shortcut branch, as in
            mmcv. Defaults to ``dict(type='Dropout', drop_prob=0.)``.
        batch_first (bool): Must be True (``[B, N, C]`` tokens).
        bias (bool): Bias of the input projection. Defaults to True.
        elliptical (bool): Use ``v_prev`` when given. False makes the module a
            dot-product attention that still returns its values. Defaults to
            True.
        reduction (str): Reduction of ``|v - v_prev|`` over tokens, ``'mean'``
            or ``'median'``. Defaults to ``'mean'``.
        eps (float): Guard of the max-normalisation. Defaults to 1e-6.
        init_cfg (dict, optional): mmengine initialisation config.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 dropout_layer: Optional[dict] = dict(
                     type='Dropout', drop_prob=0.),
                 batch_first: bool = True,
                 bias: bool = True,
                 elliptical: bool = True,
                 reduction: str = 'mean',
                 eps: float = 1e-6,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg)
        if not batch_first:
            raise ValueError('EllipticalAttention supports batch_first=True '
                             'only ([B, N, C] tokens, as mmseg\'s ViT uses).')
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims={embed_dims} must be divisible by '
                             f'num_heads={num_heads}.')
        check_estimator_args(reduction, eps)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.batch_first = batch_first
        self.elliptical = elliptical
        self.reduction = reduction
        self.eps = eps
        # Same submodules and names as mmcv's MultiheadAttention.
        self.attn = nn.MultiheadAttention(
            embed_dims, num_heads, attn_drop, bias=bias, batch_first=True)
        self.proj_drop = nn.Dropout(proj_drop)
        self.dropout_layer = build_dropout(
            dropout_layer) if dropout_layer else nn.Identity()

    @classmethod
    def from_mmcv(cls, mha: MultiheadAttention,
                  **kwargs) -> 'EllipticalAttention':
        """Take over the modules of an mmcv ``MultiheadAttention``.

        The parameters are shared, not copied, and the global RNG is left
        untouched, so a model converted right after construction has the
        same initial weights as the dot-product model for the same seed.

        Args:
            mha (MultiheadAttention): The mmcv attention to replace.
            **kwargs: ``elliptical``, ``reduction``, ``eps``.

        Returns:
            EllipticalAttention: The new module.
        """
        if not mha.batch_first:
            raise ValueError('Only batch_first=True attentions can be '
                             'converted to EllipticalAttention.')
        with torch.random.fork_rng(devices=[]):
            new = cls(
                mha.embed_dims,
                mha.num_heads,
                attn_drop=mha.attn.dropout,
                bias=mha.attn.in_proj_bias is not None,
                init_cfg=mha.init_cfg,
                **kwargs)
        new.attn, new.proj_drop, new.dropout_layer = (mha.attn, mha.proj_drop,
                                                      mha.dropout_layer)
        return new

    def extra_repr(self) -> str:
        return (f'elliptical={self.elliptical}, reduction={self.reduction!r}, '
                f'eps={self.eps}')

    def qkv(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Project tokens ``[B, N, C]`` to q, k, v of shape ``[B, H, N, d]``."""
        B, N, C = x.shape
        qkv = F.linear(x, self.attn.in_proj_weight, self.attn.in_proj_bias)
        qkv = qkv.view(B, N, 3, self.num_heads, C // self.num_heads)
        return qkv.permute(2, 0, 3, 1, 4).unbind(0)

    def _elliptical_qkv(self, x: Tensor,
                        v_prev: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """``q * m``, k and v ``[B, H, N, d]`` with ``m`` folded into ``W_q``.

        ``(x W_q^T + b_q) * m == x (m W_q)^T + m b_q``: scaling the C x C
        query weight per image costs O(C^2) instead of an O(N C) pass over
        ``q``, and keeps a single query tensor alive for the backward (an
        explicit ``q * m`` would be a second one, saved by the attention).
        k and v come first, from one GEMM, because ``m`` needs v.
        """
        B, N, C = x.shape
        H, d = self.num_heads, C // self.num_heads
        # split, not two slices: one backward node that concatenates the
        # gradients instead of two that zero-fill a full-size buffer each.
        w_q, w_kv = self.attn.in_proj_weight.split([C, 2 * C])
        b_q = b_kv = None
        if self.attn.in_proj_bias is not None:
            b_q, b_kv = self.attn.in_proj_bias.split([C, 2 * C])
        kv = F.linear(x, w_kv, b_kv)
        k, v = kv.view(B, N, 2, H, d).permute(2, 0, 3, 1, 4).unbind(0)
        m = relevance(v, v_prev, self.reduction, self.eps).reshape(B, C, 1)
        w_q = w_q * m  # [B, C, C]: row c of W_q scaled by m_c
        b_q = None if b_q is None else b_q * m[..., 0]  # [B, C]
        if B == 1:  # one GEMM with the bias, like the dot-product path
            q = F.linear(x, w_q[0], None if b_q is None else b_q[0])
        elif b_q is None:
            q = torch.bmm(x, w_q.transpose(1, 2))
        else:
            q = torch.baddbmm(b_q[:, None], x, w_q.transpose(1, 2))
        return q.view(B, N, H, d).transpose(1, 2), k, v

    def relevance(self, v: Tensor, v_prev: Optional[Tensor]) -> Optional[Tensor]:
        """``m`` of shape ``[B, H, 1, d]``, or None for dot-product scoring."""
        if v_prev is None or not self.elliptical:
            return None
        return relevance(v, v_prev, self.reduction, self.eps)

    def attention_weights(self, x: Tensor,
                          v_prev: Optional[Tensor] = None) -> Tensor:
        """Materialised attention probabilities ``[B, H, N, N]`` (analysis).

        Args:
            x (Tensor): Normalised input tokens ``[B, N, C]``, as passed to
                :meth:`forward`.
            v_prev (Tensor, optional): Previous layer's values.

        Returns:
            Tensor: Softmax-normalised rows (no dropout).
        """
        q, k, v = self.qkv(x)
        m = self.relevance(v, v_prev)
        if m is not None:
            q = q * m
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1]**-0.5
        return scores.softmax(dim=-1)

    def forward(self,
                query: Tensor,
                identity: Optional[Tensor] = None,
                v_prev: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """Attend and add the shortcut.

        Args:
            query (Tensor): Normalised tokens ``[B, N, C]``.
            identity (Tensor, optional): Shortcut added to the output;
                defaults to ``query``.
            v_prev (Tensor, optional): Values ``[B, H, N, d]`` returned by the
                previous layer's attention. None: dot-product attention.

        Returns:
            tuple[Tensor, Tensor]: The output ``[B, N, C]`` and this layer's
            values ``[B, H, N, d]`` (detached), to pass to the next layer.
        """
        if identity is None:
            identity = query
        B, N, C = query.shape
        if v_prev is not None and self.elliptical:
            q, k, v = self._elliptical_qkv(query, v_prev)
        else:
            q, k, v = self.qkv(query)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn.dropout if self.training else 0.)
        out = self.attn.out_proj(out.transpose(1, 2).reshape(B, N, C))
        return identity + self.dropout_layer(self.proj_drop(out)), v.detach()
