"""The value chain: how layer l reads the values of layer l - 1
(docs/models.md, "How it works")."""
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.checkpoint import checkpoint


@dataclass
class ChainCall:
    """One call of an attention inside a value chain.

    Attributes:
        v_prev (Tensor, optional): The previous layer's values
            ``[B, H, N, d]``, or None.
        keep (bool): Whether the next layer reads this layer's values.
        owned (bool): ``v_prev`` may be released once read and, without
            gradient, overwritten by ``|v - v_prev|``.
        values (Tensor, optional): This layer's values (:meth:`hand_on`).
    """
    v_prev: Optional[Tensor] = None
    keep: bool = False
    owned: bool = False
    values: Optional[Tensor] = None

    def hand_on(self,
                values: Tensor,
                own_tensor: bool,
                detach: bool = True) -> None:
        """Keep this layer's values for the next layer (if it reads them):
        detached, or without gradient copied off the qkv projection.

        Args:
            values (Tensor): In the layout the next layer compares.
            own_tensor (bool): ``values`` is no view of the projection.
            detach (bool): False: keep their graph (adaptive attacks).
        """
        if not self.keep:
            return
        if values.requires_grad:
            values = values.detach() if detach else values
        elif not (own_tensor or torch.is_grad_enabled()):
            values = values.clone()
        self.values = values

    def take_previous(self) -> Tuple[Tensor, bool]:
        """The previous values, released once read if owned (not kept
        through the MLP), and whether the estimator may overwrite them
        (owned, without gradient)."""
        v_prev = self.v_prev
        if self.owned:
            self.v_prev = None
        return v_prev, self.owned and not torch.is_grad_enabled()


class ChainCallMixin:
    """How an attention receives the previous layer's values for one call
    and hands its own on."""
    _chain_call: Optional[ChainCall] = None

    @property
    def chain_call(self) -> Optional[ChainCall]:
        """The call in progress (None: outside a value chain)."""
        return self._chain_call

    @contextmanager
    def chained(self,
                v_prev: Optional[Tensor] = None,
                keep: bool = False,
                owned: bool = False) -> Iterator[ChainCall]:
        """Give the calls inside the previous values; collect this layer's
        in ``call.values``.

        Args:
            v_prev (Tensor, optional): The previous layer's values (None:
                dot-product scores).
            keep (bool): Collect this layer's values.
            owned (bool): ``v_prev`` may be overwritten.

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
        """:meth:`chained`'s entry."""
        self._chain_call = ChainCall(v_prev, keep, owned)
        return self._chain_call

    def end_call(self) -> None:
        """:meth:`chained`'s exit."""
        self._chain_call = None


class ValueChain:
    """Hands each layer's attention values to the next layer, per forward,
    only where the next layer scores elliptically; each is dropped once read.

    Args:
        attentions (Sequence[nn.Module]): The chain's elliptical attentions,
            in forward order.
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
    """Runs an mmseg transformer layer inside a :class:`ValueChain` (outside
    one it is mmseg's layer with dot-product scores)."""
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
            # Only the call holds the previous values, so the attention
            # drops them once read instead of keeping them through the MLP.
            call = self.chained_attention.begin_call(
                chain.take(index), keep, owned=True)
            out, values = self._forward_in_call(call, x, *args, **kwargs)
        chain.put(index, values)
        return out

    def _checkpointed(self, x: Tensor, v_prev: Optional[Tensor], keep: bool,
                      *args, **kwargs):
        # v_prev is an input, so a recomputation sees its own forward's;
        # try/finally, not a context manager: torch.compile traces it.
        call = self.chained_attention.begin_call(v_prev, keep)
        self.with_cp = False
        try:
            return self._forward_in_call(call, x, *args, **kwargs)
        finally:
            self.with_cp = True

    def _forward_in_call(self, call: ChainCall, x: Tensor, *args, **kwargs):
        try:
            out = super().forward(x, *args, **kwargs)
        finally:
            self.chained_attention.end_call()
        return out, call.values
