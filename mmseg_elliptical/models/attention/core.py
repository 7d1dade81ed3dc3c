"""The method, and what every elliptical attention kind shares.

Elliptical Attention (Nielsen et al., NeurIPS 2024, arXiv 2406.13770) replaces
the dot product ``q . k`` by ``(q * m) . k``, where ``m`` weights each head
coordinate by how much the value vectors move along it between consecutive
layers::

    m_d = mean_n |v^l[n, d] - v^(l-1)[n, d]|      per image and head
    m   = m / max_d m_d                           (delta of the paper cancels)
    out = softmax((q * m) k^T / sqrt(d) + bias) v

``m`` is a constant for autograd and there are no new parameters. Because
``(q * m) . k`` is still a dot product, the fused
``scaled_dot_product_attention`` computes it without materialising the
N x N score matrix.

Every attention kind (:mod:`.multihead` for ViT, MiT and Twins, BEiT, Swin) is
a subclass of the mmseg / mmcv class it replaces, mixed with
:class:`EllipticalAttentionMixin`, and has two paths chosen by ``fused_attn``
(as in timm): the fused one and an explicit one that materialises the
probabilities (the paper's formulation, used for attention maps, the
benchmark's paper reference and the tests). The previous layer's values reach
an attention through :meth:`EllipticalAttentionMixin.chained`, which the
layers of :mod:`..layers` call.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field
from numbers import Real
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

REDUCTIONS = ('mean', 'median')


def check_estimator_args(reduction: str, eps: float, owner: str = '') -> float:
    """Validate the estimator options; a ``ValueError`` names the bad one.

    Args:
        reduction (str): Reduction over tokens, one of ``REDUCTIONS``.
        eps (float): Guard of the max-normalisation, a finite number > 0
            (numpy scalars are accepted).
        owner (str): Prefix naming the argument's owner in the message.

    Returns:
        float: ``eps`` as a Python float.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f'{owner}relevance_reduction={reduction!r} is not '
                         f'supported; choose one of {REDUCTIONS}.')
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, Real) \
            or not 0 < eps < float('inf'):
        raise ValueError(f'{owner}relevance_eps={eps!r} must be a finite '
                         'number > 0 (e.g. 1e-6).')
    return float(eps)


@torch.no_grad()
def relevance(v: Tensor,
              v_prev: Tensor,
              reduction: str = 'mean',
              eps: float = 1e-6,
              overwrite: bool = False) -> Tensor:
    """Estimate the coordinate-wise relevance ``m`` of each head.

    Args:
        v (Tensor): Values of this layer, shape ``[B, H, N, d]``.
        v_prev (Tensor): Values of the previous layer, same shape.
        reduction (str): ``'mean'`` (the paper) or ``'median'`` (the authors'
            robust variant) of ``|v - v_prev|`` over the N tokens.
        eps (float): When ``max_d m_d <= eps`` (e.g. identical values) there is
            no evidence for any direction and ``m`` falls back to all ones,
            i.e. plain dot-product attention, instead of dividing by zero.
        overwrite (bool): Compute ``|v - v_prev|`` in the memory of
            ``v_prev`` (which is then lost) instead of a temporary, as the
            value chain does in inference. Defaults to False.

    Returns:
        Tensor: ``m`` of shape ``[B, H, 1, d]`` in ``[0, 1]`` with max 1 per
        image and head, in ``v.dtype``; computed without gradient.
    """
    if v.shape != v_prev.shape:
        raise ValueError(
            f'Elliptical attention needs the previous layer\'s values with '
            f'the same shape as this layer\'s, got {tuple(v_prev.shape)} and '
            f'{tuple(v.shape)}: both layers must see the same tokens and '
            'heads.')
    # At most one temporary (|v - v_prev|, computed in place) and one
    # reduction that accumulates in fp32 without an fp32 copy of its input.
    if overwrite:
        diff = v_prev.sub_(v).abs_()
    else:
        diff = torch.sub(v, v_prev).abs_()
    if reduction == 'mean':
        m = diff.mean(dim=-2, keepdim=True, dtype=torch.float32)
    else:
        m = diff.float().median(dim=-2, keepdim=True).values
    top = m.amax(dim=-1, keepdim=True)
    m = torch.where(top > eps, m / top.clamp_min(eps), 1.)
    return m.to(v.dtype)


def split_heads(x: Tensor, parts: int, num_heads: int) -> Tuple[Tensor, ...]:
    """Split ``[B, N, parts * C]`` into ``parts`` tensors ``[B, H, N, d]``."""
    B, N, C = x.shape
    x = x.view(B, N, parts, num_heads, C // (parts * num_heads))
    return x.permute(2, 0, 3, 1, 4).unbind(0)


def relative_position_bias(table: Tensor, index: Tensor) -> Tensor:
    """mmseg's relative position bias ``[H, N, N]`` of BEiT and Swin.

    mmseg looks up rows of the ``[L, H]`` table, then permutes them (a
    contiguous copy); one ``index_select`` on the transposed table gives one
    N x N tensor instead of two, 2.5x faster (BEiT-B at 512: 80 -> 30 ms per
    layer on one CPU thread).

    Args:
        table (Tensor): ``relative_position_bias_table`` ``[L, H]``.
        index (Tensor): ``relative_position_index`` ``[N, N]``.

    Returns:
        Tensor: ``[H, N, N]``.
    """
    return table.t().index_select(1, index.view(-1)).view(-1, *index.shape)


@dataclass
class ChainCall:
    """One call of an attention inside a value chain.

    Attributes:
        v_prev (Tensor, optional): The previous layer's values, in the layout
            the attention compares (``[B, H, N, d]``), or None.
        keep (bool): Whether the next layer reads this layer's values.
        owned (bool): Whether ``v_prev`` belongs to the call (a value chain
            hands it on and drops it): the first projection then releases it
            once read, and without gradient computes ``|v - v_prev|`` in its
            memory.
        values (Tensor, optional): This layer's values (detached), set by the
            attention when ``keep``. Without gradient they are a copy when
            ``v`` is a view of the qkv projection, which would otherwise stay
            alive (q and k too) until the next layer has read them.
    """
    v_prev: Optional[Tensor] = None
    keep: bool = False
    owned: bool = False
    values: Optional[Tensor] = None


@dataclass
class AttentionRecord:
    """What an attention computed, recorded on demand (see ``analysis``).

    Attributes:
        probs (list[Tensor]): Attention probabilities ``[B', H, N, M]`` of each
            call, before dropout (explicit path only).
        relevance (list[Tensor]): ``m`` ``[B, H, 1, d]`` of each call that
            scored elliptically.
        to_cpu (bool): Move what is recorded to the CPU.
    """
    probs: List[Tensor] = field(default_factory=list)
    relevance: List[Tensor] = field(default_factory=list)
    to_cpu: bool = False

    def keep(self, what: str, tensor: Tensor) -> None:
        """Append a detached ``tensor`` to the list ``what``."""
        tensor = tensor.detach()
        getattr(self, what).append(tensor.cpu() if self.to_cpu else tensor)


class EllipticalAttentionMixin:
    """What every elliptical attention kind shares.

    Mixed in before the mmseg / mmcv attention class it makes elliptical, so
    parameter names, initialisation and checkpoints stay that class's. A
    module becomes elliptical either by construction (the subclass takes the
    parent's arguments plus ``elliptical``, ``reduction`` and ``eps``) or in
    place, by :func:`mmseg_elliptical.models.layers.to_elliptical`.

    Attributes:
        elliptical (bool): Score elliptically when the previous layer's values
            are given; False makes the module a dot-product attention that
            still hands its values on.
        reduction (str): ``'mean'`` or ``'median'`` over tokens.
        eps (float): Guard of the max-normalisation.
        fused_attn (bool): True (default): ``scaled_dot_product_attention``.
            False: the explicit path, which materialises the probabilities.
        attention_record (AttentionRecord, optional): When set, each call
            appends ``m`` and (explicit path) the probabilities to it.
    """

    def __init__(self,
                 *args,
                 elliptical: bool = True,
                 reduction: str = 'mean',
                 eps: float = 1e-6,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.init_elliptical(elliptical, reduction, eps)

    def init_elliptical(self,
                        elliptical: bool = True,
                        reduction: str = 'mean',
                        eps: float = 1e-6) -> None:
        """Set the elliptical options (also after an in-place conversion)."""
        self.eps = check_estimator_args(reduction, eps)
        self.elliptical = bool(elliptical)
        self.reduction = reduction
        self.fused_attn = True
        self.attention_record: Optional[AttentionRecord] = None
        self._chain_call: Optional[ChainCall] = None

    def extra_repr(self) -> str:
        parent = super().extra_repr()
        mine = (f'elliptical={self.elliptical}, reduction={self.reduction!r}, '
                f'eps={self.eps}, fused_attn={self.fused_attn}')
        return f'{parent}, {mine}' if parent else mine

    @contextmanager
    def chained(self,
                v_prev: Optional[Tensor] = None,
                keep: bool = False,
                owned: bool = False) -> Iterator[ChainCall]:
        """Give the calls inside the previous values; collect this layer's.

        Example::

            with attn.chained(v_prev, keep=True) as call:
                out = attn(x)          # scores with m from call.v_prev
            v = call.values            # this layer's values, detached

        Args:
            v_prev (Tensor, optional): The previous layer's values (None:
                dot-product scoring).
            keep (bool): Collect this layer's values in ``call.values``.
            owned (bool): ``v_prev`` may be overwritten (see
                :class:`ChainCall`). Defaults to False.

        Yields:
            ChainCall: The call's state.
        """
        call = self.begin_call(v_prev, keep, owned)
        try:
            yield call
        finally:
            self.end_call()

    def begin_call(self,
                   v_prev: Optional[Tensor] = None,
                   keep: bool = False,
                   owned: bool = False) -> ChainCall:
        """Start a chain call (what :meth:`chained` does on entry)."""
        self._chain_call = ChainCall(v_prev, keep, owned)
        return self._chain_call

    def end_call(self) -> None:
        """End the chain call (what :meth:`chained` does on exit)."""
        self._chain_call = None

    def scores_elliptically(self) -> bool:
        """Whether the current call scores with ``m``."""
        call = self._chain_call
        return self.elliptical and call is not None and call.v_prev is not None

    def project(self,
                x_q: Tensor,
                x_kv: Tensor,
                weight: Tensor,
                bias: Optional[Tensor],
                groups: int = 1,
                to_image: Optional[Callable[[Tensor], Tensor]] = None
                ) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
        """Project to q, k, v and estimate ``m`` from v and the previous v.

        q comes from the same GEMM as k and v (when ``x_kv is x_q``), except
        when q will be scaled by ``m`` with gradient or under
        ``torch.compile``: then q gets its own GEMM, so that ``q * m`` is the
        only query tensor the backward keeps (a view of one qkv buffer would
        keep the unscaled q as well), and compiled inference can write
        ``q * m`` over q (an out-of-place product beside the whole qkv buffer
        held one ``[B, N, C]`` tensor more at the peak).

        Args:
            x_q (Tensor): Query tokens ``[B', N, C]``.
            x_kv (Tensor): Key/value tokens ``[B', M, C]`` (may be ``x_q``).
            weight (Tensor): Packed ``[W_q; W_k; W_v]`` of shape ``[3C, C]``.
            bias (Tensor, optional): Packed bias ``[3C]``.
            groups (int): Consecutive batch rows that share one ``m`` (the
                windows of an image). Defaults to 1.
            to_image (callable, optional): Maps v ``[B', H, M, d]`` to the
                per-image layout ``[B, H, M', d]`` that ``m`` is estimated
                on and the next layer compares with.

        Returns:
            tuple: q, k, v ``[B', H, *, d]`` and the ``m`` that :meth:`attend`
            applies to q (``[B', H, 1, d]``; None for dot-product scores).
        """
        H = self.num_heads
        C = weight.shape[0] // 3
        call = self._chain_call
        elliptical = self.scores_elliptically()
        grad = torch.is_grad_enabled()
        if x_kv is x_q and not (elliptical and (
                grad or torch.compiler.is_compiling())):
            q, k, v = split_heads(F.linear(x_q, weight, bias), 3, H)
        else:
            w_q, w_kv = weight.split([C, 2 * C])
            b_q = b_kv = None
            if bias is not None:
                b_q, b_kv = bias.split([C, 2 * C])
            k, v = split_heads(F.linear(x_kv, w_kv, b_kv), 2, H)
            q, = split_heads(F.linear(x_q, w_q, b_q), 1, H)
        m = None
        if call is not None and (call.keep or elliptical):
            v_image = v if to_image is None else to_image(v)
            if call.keep:  # to_image's result is a tensor of its own
                call.values = v_image.detach()
                if not grad and to_image is None:
                    call.values = call.values.clone()
            if elliptical:
                m = relevance(v_image, call.v_prev, self.reduction, self.eps,
                              overwrite=call.owned and not grad)
                if call.owned:  # read once: not kept through the MLP
                    call.v_prev = None
                if self.attention_record is not None:
                    self.attention_record.keep('relevance', m)
        if m is not None and groups > 1:
            m = m.repeat_interleave(groups, dim=0)
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
            q, k, v (Tensor): ``[B', H, N, d]``, ``[B', H, M, d]`` (twice).
            m (Tensor, optional): Relevance ``[B', H, 1, d]`` to apply to
                q. With gradient as ``q * m``, whose backward keeps only
                ``m``; without (fused path) on k instead of q when there are
                fewer keys than queries, since ``(q * m) . k = q . (k * m)``,
                and in place unless compiled.
            bias (Tensor, optional): Additive score bias broadcastable to
                ``[B', H, N, M]`` (relative positions, shift masks).
            dropout_p (float): Dropout on the probabilities (training only).
            scale (float, optional): Score scale; defaults to ``d ** -0.5``.

        Returns:
            Tensor: ``[B', H, N, d]``.
        """
        if not self.training:
            dropout_p = 0.
        if not self.fused_attn:  # the paper's formulation, probabilities kept
            if m is not None:
                q = q * m
            scores = (q @ k.transpose(-2, -1)) * (
                q.shape[-1]**-0.5 if scale is None else scale)
            if bias is not None:
                scores = scores + bias
            probs = scores.softmax(dim=-1)
            if self.attention_record is not None:
                self.attention_record.keep('probs', probs)
            return F.dropout(probs, dropout_p, self.training) @ v
        if m is not None:
            if torch.is_grad_enabled():
                q = q * m  # its backward keeps m only
            elif k.shape[-2] < q.shape[-2]:
                # (q * m) . k = q . (k * m): fewer keys than queries
                # (spatial reduction) to scale
                k = k * m if torch.compiler.is_compiling() else k.mul_(m)
            else:
                # Compiled, q has its own GEMM (see project) and inductor
                # writes the product over it; an in-place product on a view
                # would be functionalised into a copy.
                q = q * m if torch.compiler.is_compiling() else q.mul_(m)
        if bias is not None:
            bias = bias.to(q.dtype)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
