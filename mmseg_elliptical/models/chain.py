"""The value chain: how layer l reads the values of layer l - 1.

The previous layer's values reach each attention through a
:class:`ValueChain` shared by the layers of one chain (a ViT, one stage of a
hierarchical backbone, the Segmenter head, Mask2Former's decoder). Each
converted layer's ``forward`` (:class:`EllipticalLayerMixin`) takes the
previous values from the chain before running mmseg's own ``forward`` and
hands its attention's values on after it, so no backbone or layer
``forward`` of mmseg is copied.

Gradient checkpointing (``with_cp``) is done by the mixin, with the previous
values as an explicit input of the checkpointed function: a recomputation in
the backward sees the values of its own forward, also when several forwards
run before one backward (gradient accumulation).
"""
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

import torch.nn as nn
from torch import Tensor
from torch.utils.checkpoint import checkpoint


@dataclass
class ChainCall:
    """One call of an attention inside a value chain.

    Attributes:
        v_prev (Tensor, optional): The previous layer's values, in the layout
            the attention compares (``[B, H, N, d]``), or None.
        keep (bool): Whether the next layer reads this layer's values.
        owned (bool): ``v_prev`` belongs to the call: it is released once
            read and, without gradient, overwritten by ``|v - v_prev|``.
        values (Tensor, optional): This layer's values (detached), set when
            ``keep``; without gradient a copy, so that the qkv projection
            they would view is freed.
    """
    v_prev: Optional[Tensor] = None
    keep: bool = False
    owned: bool = False
    values: Optional[Tensor] = None


class ChainCallMixin:
    """How an attention receives the previous layer's values for one call
    and hands its own on (:class:`ChainCall`); mixed into every elliptical
    attention by :class:`~.attention.core.EllipticalAttentionMixin`."""
    _chain_call: Optional[ChainCall] = None

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
                dot-product scores).
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


class ValueChain:
    """Hands each layer's attention values to the next layer, per forward.

    Values are kept only where the next layer scores elliptically, and each is
    dropped as soon as it is read. The first layer of the chain clears what a
    failed forward may have left.

    Args:
        attentions (Sequence[nn.Module]): The chain's elliptical attentions,
            in forward order (their ``elliptical`` flags are read live).
    """

    def __init__(self, attentions: Sequence[nn.Module]) -> None:
        self.attentions = list(attentions)
        self.values: List[Optional[Tensor]] = [None] * len(self.attentions)

    def __len__(self) -> int:
        return len(self.attentions)

    def keeps(self, index: int) -> bool:
        """Whether the layer after ``index`` reads ``index``'s values."""
        return index + 1 < len(self) and self.attentions[index + 1].elliptical

    def take(self, index: int) -> Optional[Tensor]:
        """The values layer ``index`` scores with (None: dot-product)."""
        if index == 0:
            self.values = [None] * len(self)
            return None
        if not self.attentions[index].elliptical:
            return None
        v_prev, self.values[index - 1] = self.values[index - 1], None
        if v_prev is None:
            raise RuntimeError(
                f'Layer {index} of this chain scores elliptically with the '
                f'values of layer {index - 1} from the same forward, but '
                f'layer {index - 1} has not run since layer 0; run the '
                'layers in order through the backbone\'s forward.')
        return v_prev

    def put(self, index: int, values: Optional[Tensor]) -> None:
        """Keep layer ``index``'s values if the next layer reads them."""
        if self.keeps(index):
            self.values[index] = values


class EllipticalLayerMixin:
    """Runs an mmseg transformer layer inside a :class:`ValueChain`.

    Mixed in before the mmseg layer class; the layer's attention
    (:attr:`ATTENTION`, ``attn`` in mmseg's layers) must be elliptical.
    Outside a chain (``value_chain`` None) the layer is mmseg's, with
    dot-product scores.
    """
    ATTENTION = 'attn'  # the attribute holding the chained attention
    value_chain: Optional[ValueChain] = None
    chain_index: int = 0

    @property
    def chained_attention(self) -> nn.Module:
        """The layer's attention that reads and hands on the values."""
        return getattr(self, self.ATTENTION)

    def forward(self, x: Tensor, *args, **kwargs):
        chain = self.value_chain
        if chain is None:
            return super().forward(x, *args, **kwargs)
        index = self.chain_index
        keep = chain.keeps(index)
        if getattr(self, 'with_cp', False) and x.requires_grad:
            out, values = checkpoint(
                self._checkpointed,
                x,
                chain.take(index),
                keep,
                *args,
                use_reentrant=False,
                **kwargs)
        else:
            # Only the call holds the previous values (not an argument
            # tuple), so that the attention drops them once read instead of
            # keeping them through the MLP. mmseg's layers checkpoint only
            # when x requires grad, so none does here.
            call = self.chained_attention.begin_call(
                chain.take(index), keep, owned=True)
            out, values = self._forward_in_call(call, x, *args, **kwargs)
        chain.put(index, values)
        return out

    def _checkpointed(self, x: Tensor, v_prev: Optional[Tensor], keep: bool,
                      *args, **kwargs):
        # The previous values are an input of the checkpointed function, so
        # a recomputation in the backward sees those of its own forward.
        # mmseg's own checkpoint is off inside; try/finally rather than
        # context managers: torch.compile traces it.
        call = self.chained_attention.begin_call(v_prev, keep)
        self.with_cp = False
        try:
            return self._forward_in_call(call, x, *args, **kwargs)
        finally:
            self.with_cp = True

    def _forward_in_call(self, call: ChainCall, x: Tensor, *args, **kwargs):
        # mmseg's forward inside the attention's chain call.
        try:
            out = super().forward(x, *args, **kwargs)
        finally:
            self.chained_attention.end_call()
        return out, call.values
