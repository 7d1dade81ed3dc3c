"""Elliptical Attention (Nielsen et al., NeurIPS 2024, arXiv 2406.13770).

The dot product ``q . k`` becomes ``(q * m) . k``, where ``m`` weights each
head coordinate by how much the value vectors move along it between two
consecutive layers::

    m_d = mean_n |v^l[n, d] - v^(l-1)[n, d]|      per image and head
    m   = m / max_d m_d                           (delta of the paper cancels)
    out = softmax((q * m) k^T / sqrt(d) + bias) v

``m`` is a constant for autograd and there are no new parameters; ``(q * m)
. k`` is still a dot product, so SDPA computes it without N x N scores
(docs/models.md, "How it works").
"""
from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..chain import ChainCall, ChainCallMixin
from ..checks import check_estimator_args
from .utils import AttentionRecord

# On the CPU, SDPA has no fused kernel for a mask that needs a gradient or
# for dropout; its math kernel is then slower than the explicit path up to
# about this many keys (docs/benchmark.md), faster above.
EXPLICIT_MAX_KEYS = 512


def differentiable_relevance(v: Tensor,
                             v_prev: Tensor,
                             reduction: str = 'mean',
                             eps: float = 1e-6,
                             overwrite: bool = False) -> Tensor:
    """The coordinate-wise relevance ``m`` of each image and head.

    Args:
        v (Tensor): Values of this layer, ``[B, H, N, d]``.
        v_prev (Tensor): Values of the previous layer, same shape.
        reduction (str): ``'mean'`` (the paper) or ``'median'`` (the authors'
            robust variant) of ``|v - v_prev|`` over the N tokens.
        eps (float): When ``max_d m_d <= eps`` (e.g. identical values) there is
            no evidence for any direction and ``m`` is all ones (plain
            dot-product attention) instead of a division by zero.
        overwrite (bool): Compute ``|v - v_prev|`` in the memory of
            ``v_prev``, which is then lost. Defaults to False.

    Returns:
        Tensor: ``m`` ``[B, H, 1, d]`` in ``[0, 1]``, max 1 per image and
        head, in ``v.dtype``.
    """
    if v.shape != v_prev.shape:
        raise ValueError(
            f'Elliptical attention needs the previous layer\'s values with '
            f'the same shape as this layer\'s, got {tuple(v_prev.shape)} and '
            f'{tuple(v.shape)}: both layers must see the same tokens and '
            'heads.')
    diff = (v_prev.sub_(v) if overwrite else torch.sub(v, v_prev)).abs_()
    if reduction == 'mean':  # accumulates in fp32 without an fp32 copy
        m = diff.mean(dim=-2, keepdim=True, dtype=torch.float32)
    else:
        m = diff.float().median(dim=-2, keepdim=True).values
    top = m.amax(dim=-1, keepdim=True)
    m = torch.where(top > eps, m / top.clamp_min(eps), 1.)
    return m.to(v.dtype)


#: The relevance the forward uses: ``m`` is a constant for autograd.
relevance = torch.no_grad()(differentiable_relevance)


def chained(v: Tensor) -> Tensor:
    """What the value chain hands on of this layer's values: detached."""
    return v.detach()


@contextmanager
def adaptive_relevance() -> Iterator[None]:
    """Let the gradient flow through ``m`` and the chained values while the
    context is open: an attack then differentiates the whole function
    (adaptive attacks, Tramer et al. 2020). Training and inference outside
    it keep ``m`` a constant; the forward checks nothing per call (the
    context swaps this module's :func:`relevance` and :func:`chained`).
    """
    global relevance, chained
    saved = relevance, chained
    relevance, chained = differentiable_relevance, _identity
    try:
        yield
    finally:
        relevance, chained = saved


def _identity(v: Tensor) -> Tensor:
    return v


class Scaling(NamedTuple):
    """How ``m`` enters one call's scores (``(q * m) . k = q . (k * m)``).

    Attributes:
        keys (bool): Scale k instead of q.
        own_gemm (bool): q comes from its own GEMM, not from a view of the
            packed qkv projection.
        in_place (bool): Multiply in place.
    """
    keys: bool
    own_gemm: bool
    in_place: bool

    def apply(self, q: Tensor, k: Tensor, m: Tensor) -> Tuple[Tensor, Tensor]:
        """q and k with ``m`` applied to one of them."""
        if self.keys:
            return q, (k.mul_(m) if self.in_place else k * m)
        return (q.mul_(m) if self.in_place else q * m), k


def scaling(num_queries: int, num_keys: int) -> Scaling:
    """The one decision of where and how ``m`` is applied.

    * With gradient: ``q * m`` after q's own GEMM, whose backward keeps only
      ``m`` (a view of the qkv buffer would keep the unscaled q as well).
    * Without, on the fewer of queries and keys (spatial reduction: k).
    * Eager inference multiplies in place. Compiled, inductor writes an
      out-of-place ``q * m`` over q when q has a buffer of its own (an
      in-place product on a view is functionalised into a copy of the
      whole projection).

    Args:
        num_queries (int): Query tokens.
        num_keys (int): Key tokens.

    Returns:
        Scaling: The plan, used by :meth:`EllipticalAttentionMixin.project`
        (which GEMM) and :meth:`EllipticalAttentionMixin.attend` (which
        product).
    """
    if torch.is_grad_enabled():
        return Scaling(keys=False, own_gemm=True, in_place=False)
    compiled = torch.compiler.is_compiling()
    if num_keys < num_queries:
        return Scaling(keys=True, own_gemm=False, in_place=not compiled)
    return Scaling(keys=False, own_gemm=compiled, in_place=not compiled)


def split_heads(x: Tensor, parts: int, num_heads: int) -> Tuple[Tensor, ...]:
    """Split ``[B, N, parts * C]`` into ``parts`` tensors ``[B, H, N, d]``."""
    B, N, C = x.shape
    x = x.view(B, N, parts, num_heads, C // (parts * num_heads))
    return x.permute(2, 0, 3, 1, 4).unbind(0)


class EllipticalAttentionMixin(ChainCallMixin):
    """What every elliptical attention kind shares.

    Mixed in before the mmseg / mmcv attention class, so parameter names,
    initialisation and checkpoints stay that class's. A module becomes
    elliptical by construction (the parent's arguments plus
    :attr:`OWN_ARGS`) or in place by
    :func:`~mmseg_elliptical.models.conversion.to_elliptical`.

    Args:
        elliptical (bool): Score elliptically when the previous layer's values
            are given; False: dot-product scores, values still handed on.
        relevance_reduction (str): ``'mean'`` or ``'median'`` over tokens.
        relevance_eps (float): Guard of the max-normalisation.

    Attributes:
        fused_attn (bool): True (default): SDPA where it has a fast kernel
            (:meth:`fused_kernel`). False: always the explicit path.
        attention_record (AttentionRecord, optional): When set, each call
            appends ``m`` and (explicit path) the probabilities to it.
    """
    OWN_ARGS = ('elliptical', 'relevance_reduction', 'relevance_eps')

    def __init__(self,
                 *args,
                 elliptical: bool = True,
                 relevance_reduction: str = 'mean',
                 relevance_eps: float = 1e-6,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.init_elliptical(elliptical, relevance_reduction, relevance_eps)

    def init_elliptical(self,
                        elliptical: bool = True,
                        relevance_reduction: str = 'mean',
                        relevance_eps: float = 1e-6) -> None:
        """Set the options; takes the class's own arguments
        (:attr:`OWN_ARGS`), as every ``init_elliptical`` does."""
        self.relevance_eps = check_estimator_args(relevance_reduction,
                                                  relevance_eps)
        self.relevance_reduction = relevance_reduction
        self.elliptical = bool(elliptical)
        self.fused_attn = True
        self.attention_record: Optional[AttentionRecord] = None
        self._chain_call: Optional[ChainCall] = None

    def extra_repr(self) -> str:
        parent = super().extra_repr()
        mine = (f'elliptical={self.elliptical}, relevance_reduction='
                f'{self.relevance_reduction!r}, relevance_eps='
                f'{self.relevance_eps}, fused_attn={self.fused_attn}')
        return f'{parent}, {mine}' if parent else mine

    def scores_elliptically(self) -> bool:
        """Whether the current call scores with ``m``."""
        call = self._chain_call
        return self.elliptical and call is not None and call.v_prev is not None

    def project(
        self,
        x_q: Tensor,
        x_kv: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        to_image: Optional[Callable[[Tensor], Tensor]] = None
    ) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
        """Project to q, k, v and estimate ``m`` from v and the previous v.

        Args:
            x_q (Tensor): Query tokens ``[B', N, C]``.
            x_kv (Tensor): Key/value tokens ``[B', M, C]`` (may be ``x_q``).
            weight (Tensor): Packed ``[W_q; W_k; W_v]`` of shape ``[3C, C]``.
            bias (Tensor, optional): Packed bias ``[3C]``.
            to_image (callable, optional): Maps v ``[B', H, M, d]`` to the
                per-image layout ``[B, H, M', d]`` that ``m`` is estimated
                on and the next layer compares with.

        Returns:
            tuple: q, k, v ``[B', H, *, d]`` and ``m`` ``[B', H, 1, d]`` for
            :meth:`attend` (None for dot-product scores).
        """
        H = self.num_heads
        C = weight.shape[0] // 3
        call = self._chain_call
        elliptical = self.scores_elliptically()
        own_gemm = elliptical and scaling(x_q.shape[1], x_kv.shape[1]).own_gemm
        if x_kv is x_q and not own_gemm:
            q, k, v = split_heads(F.linear(x_q, weight, bias), 3, H)
        else:
            w_q, w_kv = weight.split([C, 2 * C])
            b_q, b_kv = (None,
                         None) if bias is None else bias.split([C, 2 * C])
            k, v = split_heads(F.linear(x_kv, w_kv, b_kv), 2, H)
            q, = split_heads(F.linear(x_q, w_q, b_q), 1, H)
        m = None
        if call is not None and (call.keep or elliptical):
            grad = torch.is_grad_enabled()
            v_image = v if to_image is None else to_image(v)
            if call.keep:  # to_image's result is a tensor of its own
                call.values = chained(v_image)
                if not grad and to_image is None:
                    call.values = call.values.clone()
            if elliptical:
                m = relevance(
                    v_image,
                    call.v_prev,
                    self.relevance_reduction,
                    self.relevance_eps,
                    overwrite=call.owned and not grad)
                if call.owned:  # read once: not kept through the MLP
                    call.v_prev = None
                if self.attention_record is not None:
                    self.attention_record.keep('relevance', m)
        return q, k, v, m

    def fused_kernel(self, q: Tensor, k: Tensor, bias: Optional[Tensor],
                     dropout_p: float) -> bool:
        """The one decision of the path: SDPA (True) or explicit (False).

        SDPA, unless ``fused_attn`` is off, or on the CPU in training where
        SDPA has no fused kernel (a bias that needs a gradient, dropout) and
        its math kernel is slower than the explicit path
        (:data:`EXPLICIT_MAX_KEYS`).
        """
        if not self.fused_attn:
            return False
        if q.device.type != 'cpu' or not torch.is_grad_enabled():
            return True
        math = (self.training and dropout_p > 0) or (bias is not None
                                                     and bias.requires_grad)
        return not (math and k.shape[-2] <= EXPLICIT_MAX_KEYS)

    def attend(self,
               q: Tensor,
               k: Tensor,
               v: Tensor,
               m: Optional[Tensor] = None,
               bias: Optional[Tensor] = None,
               dropout_p: float = 0.,
               scale: Optional[float] = None,
               window_mask: Optional[Tensor] = None) -> Tensor:
        """``softmax((q * m) k^T * scale + bias) v``, fused or explicit.

        Args:
            q, k, v (Tensor): ``[B', H, N, d]``, ``[B', H, M, d]`` (twice).
            m (Tensor, optional): Relevance ``[B', H, 1, d]``, applied as
                :func:`scaling` says.
            bias (Tensor, optional): Additive score bias broadcastable to
                ``[B', H, N, M]`` (relative positions).
            dropout_p (float): Dropout on the probabilities (training only).
            scale (float, optional): Score scale; defaults to ``d ** -0.5``.
            window_mask (Tensor, optional): ``[nW, N, M]`` additive mask of
                each of the ``nW`` consecutive rows of every image (Swin's
                shift mask).

        Returns:
            Tensor: ``[B', H, N, d]``.
        """
        dropout_p = dropout_p if self.training else 0.
        if bias is not None:
            bias = bias.to(q.dtype)
        if window_mask is not None:
            window_mask = window_mask.to(q.dtype)[:, None]  # [nW, 1, N, M]
        if not self.fused_kernel(q, k, bias, dropout_p):
            # The paper's formulation, probabilities materialised.
            if m is not None:
                q = q * m
            scores = (q @ k.transpose(-2, -1)) * (
                q.shape[-1]**-0.5 if scale is None else scale)
            if bias is not None:
                scores = scores + bias
            if window_mask is not None:
                shape = scores.shape
                scores = (scores.view(-1, *window_mask.shape[:1], *shape[1:]) +
                          window_mask).view(shape)
            probs = scores.softmax(dim=-1)
            if self.attention_record is not None:
                self.attention_record.keep('probs', probs)
            return F.dropout(probs, dropout_p, self.training) @ v
        if m is not None:
            q, k = scaling(q.shape[-2], k.shape[-2]).apply(q, k, m)
        if window_mask is not None:
            images = q.shape[0] // window_mask.shape[0]
            mask = window_mask if bias is None else window_mask + bias
            bias = mask.repeat(images, 1, 1, 1) if images > 1 else mask
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
