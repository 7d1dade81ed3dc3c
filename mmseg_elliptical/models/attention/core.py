"""Elliptical Attention (Nielsen et al., NeurIPS 2024, arXiv 2406.13770)::

    m_d = mean_n |v^l[n, d] - v^(l-1)[n, d]|      per image and head
    m   = m / max_d m_d                           (delta of the paper cancels)
    out = softmax((q * m) k^T / sqrt(d) + bias) v

``m`` is constant for autograd, unless ``adaptive`` (adaptive attacks).
Memory and kernels: :mod:`.policy`; the estimator as one op: :mod:`.fused`.
"""
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..chain import ChainCallMixin
from .fused import fused
from .policy import KernelPolicy, scaling
from .utils import AttentionOptions, split_heads


def differentiable_relevance(v: Tensor,
                             v_prev: Tensor,
                             reduction: str = 'mean',
                             eps: float = 1e-6,
                             overwrite: bool = False) -> Tensor:
    """The relevance ``m`` ``[B, H, 1, d]`` (in ``[0, 1]``, ``v.dtype``).

    Args:
        v (Tensor): Values of this layer, ``[B, H, N, d]``.
        v_prev (Tensor): Values of the previous layer, same shape.
        reduction (str): ``'mean'`` (the paper) or ``'median'`` over tokens.
        eps (float): ``m`` is all ones where ``max_d m_d <= eps``.
        overwrite (bool): Compute ``|v - v_prev|`` in ``v_prev``'s memory.
    """
    if v.shape != v_prev.shape:
        raise ValueError(f'Values of shape {tuple(v.shape)} and previous '
                         f'values {tuple(v_prev.shape)}: elliptical attention'
                         ' needs the same shape (the same tokens and heads).')
    diff = (v_prev.sub_(v) if overwrite else torch.sub(v, v_prev)).abs_()
    if reduction == 'mean':  # accumulates in fp32
        m = diff.mean(dim=-2, keepdim=True, dtype=torch.float32)
    else:
        m = diff.float().median(dim=-2, keepdim=True).values
    top = m.amax(dim=-1, keepdim=True)
    m = (m / top.clamp_min(eps)).masked_fill_(top <= eps, 1.)  # no 0 / 0
    return m.to(v.dtype)


#: The relevance the forward uses (one op, :mod:`.fused`): ``m`` constant.
relevance = torch.no_grad()(fused(differentiable_relevance))


class EllipticalAttentionMixin(AttentionOptions, KernelPolicy, ChainCallMixin):
    """The method of every elliptical attention kind: :meth:`project` gives
    q, k, v and ``m``, :meth:`attend` the output (fused or explicit)."""
    adaptive: bool = False  # AttentionOptions' docstring

    def chain_values(self, v: Tensor) -> Tensor:
        """``v`` as the chain hands it on: detached unless ``adaptive``."""
        return v if self.adaptive else v.detach()

    def project(
        self,
        x_q: Tensor,
        x_kv: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        to_image: Optional[Callable[[Tensor], Tensor]] = None
    ) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
        """q, k, v ``[B', H, N | M, d]`` and ``m`` ``[B', H, 1, d]``.

        Args:
            x_q, x_kv (Tensor): Query and key/value tokens ``[B', N | M, C]``.
            weight, bias (Tensor): Packed ``[3C, C]`` weight, ``[3C]`` bias.
            to_image (callable, optional): v to the value chain's layout.
        """
        H, C, call = self.num_heads, weight.shape[0] // 3, self.chain_call
        elliptical = self.elliptical and call is not None \
            and call.v_prev is not None
        own_gemm = elliptical and scaling(x_q.shape[1], x_kv.shape[1]).own_gemm
        if x_kv is x_q and not own_gemm:
            q, k, v = split_heads(F.linear(x_q, weight, bias), 3, H)
        else:
            w_q, w_kv = weight.split([C, 2 * C])
            b_q, b_kv = (None,
                         None) if bias is None else bias.split([C, 2 * C])
            k, v = split_heads(F.linear(x_kv, w_kv, b_kv), 2, H)
            q, = split_heads(F.linear(x_q, w_q, b_q), 1, H)
        if call is None or not (call.keep or elliptical):
            return q, k, v, None
        v_image = v if to_image is None else to_image(v)
        call.hand_on(v_image, to_image is not None, not self.adaptive)
        if not elliptical:
            return q, k, v, None
        v_prev, overwrite = call.take_previous()
        estimator = differentiable_relevance if self.adaptive else relevance
        m = estimator(v_image, v_prev, self.relevance_reduction,
                      self.relevance_eps, overwrite)
        self.record('relevance', m)
        return q, k, v, m

    def attend(self,
               q: Tensor,
               k: Tensor,
               v: Tensor,
               m: Optional[Tensor] = None,
               bias: Optional[Tensor] = None,
               dropout_p: float = 0.,
               scale: Optional[float] = None) -> Tensor:
        """``softmax((q * m) k^T * scale + bias) v``, fused or explicit.

        Args:
            q, k, v (Tensor): ``[..., N, d]``; k and v ``[..., M, d]``.
            m (Tensor, optional): ``[..., 1, d]``; None: dot-product scores.
            bias (Tensor, optional): Additive, broadcast to ``[..., N, M]``.
            dropout_p (float): On the probabilities, in training only.
            scale (float, optional): Defaults to ``d ** -0.5``.
        """
        dropout_p = dropout_p if self.training else 0.
        bias = None if bias is None else bias.to(q.dtype)
        if self.fused_kernel(q, k, bias, dropout_p):
            if m is not None:
                q, k = scaling(q.shape[-2], k.shape[-2]).apply(q, k, m)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
        if m is not None:
            q = q * m
        scale = q.shape[-1]**-0.5 if scale is None else scale
        scores = (q @ k.transpose(-2, -1)) * scale
        if bias is not None:
            scores = scores + bias
        probs = scores.softmax(dim=-1)
        self.record('probs', probs)
        return F.dropout(probs, dropout_p, self.training) @ v
