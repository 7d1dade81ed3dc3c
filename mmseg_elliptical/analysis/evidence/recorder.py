"""Record what transformer layers compute, on demand: outside a
:class:`LayerRecorder` block a model carries no hooks and no statistics."""
from dataclasses import dataclass, field
from typing import Any, Collection, List, Tuple, Union

import torch.nn as nn
from torch import Tensor

from ...models import AttentionRecord, EllipticalAttentionMixin
from .layers import TransformerLayers


@dataclass
class LayerRecord(AttentionRecord):
    """What one layer computed, one entry per forward call since the last
    :meth:`LayerRecorder.clear`.

    Attributes:
        tokens (list[Tensor]): Output tokens ``[B, N, C]`` of the layer.
        grids (list[tuple[int, int]]): The ``(h, w)`` token grid of each
            call (``'argument'`` and ``GridSource`` grids).
    """
    tokens: List[Tensor] = field(default_factory=list)
    grids: List[Tuple[int, int]] = field(default_factory=list)


class LayerRecorder:
    """Context manager recording tokens, probabilities and ``m`` of layers
    in :attr:`records`, one :class:`LayerRecord` per layer.

    Args:
        found (TransformerLayers): The layers (found with ``convert=True``
            for ``probs`` and ``relevance``).
        tokens (bool): Record every layer's output tokens.
        probs (bool or Collection[int]): Record the probabilities of every
            layer (True) or of these layers (on their explicit path).
        relevance (bool): Record ``m`` of elliptical layers.
        grids (bool): Record each call's token grid ``(h, w)``.
        to_cpu (bool): Move recorded tensors to the CPU.
    """

    def __init__(self,
                 found: TransformerLayers,
                 tokens: bool = True,
                 probs: Union[bool, Collection[int]] = False,
                 relevance: bool = False,
                 grids: bool = True,
                 to_cpu: bool = False) -> None:
        self.found = found
        self.layers = list(found.layers)
        n = len(self.layers)
        self.probs_layers = set(range(n) if probs is True else probs or ())
        self.want_tokens = tokens
        self.want_relevance = relevance
        self.want_grids = grids
        self.to_cpu = to_cpu
        self.attentions = [found.attention(i) for i in range(n)]
        if self.probs_layers or relevance:
            plain = [
                type(a).__name__ for a in self.attentions
                if not isinstance(a, EllipticalAttentionMixin)
            ]
            if plain:
                raise TypeError(
                    f'Recording probabilities or m needs elliptical '
                    f'attentions, got {plain}; find the layers with '
                    'transformer_layers(model, part, convert=True).')
        self.records: List[LayerRecord] = []
        self._handles: List[Any] = []
        self._fused: List[Tuple[nn.Module, bool]] = []
        self._entered = False
        self.clear()

    def _watched(self, i: int) -> bool:
        return i in self.probs_layers or self.want_relevance

    def _token_hook(self, index: int):

        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            self.records[index].keep('tokens', output)

        return hook

    def _argument_hook(self, index: int):

        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            hw = args[1] if len(args) > 1 else kwargs.get('hw_shape')
            self.records[index].grids.append(tuple(int(s) for s in hw))

        return hook

    def _source_hook(self, indices: List[int], read):

        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            hw = tuple(int(s) for s in read(output))
            for i in indices:
                self.records[i].grids.append(hw)

        return hook

    def _register_grids(self) -> None:
        found = self.found
        for s, layout in enumerate(found.layouts):
            indices = [i for i, st in enumerate(found.stages) if st == s]
            if layout.grid == 'argument':
                for i in indices:
                    self._handles.append(
                        self.layers[i].register_forward_pre_hook(
                            self._argument_hook(i), with_kwargs=True))
            elif layout.grid not in (None, 'backbone'):
                self._handles.append(
                    layout.grid.module.register_forward_hook(
                        self._source_hook(indices, layout.grid.read)))

    def __enter__(self) -> 'LayerRecorder':
        try:
            for i, layer in enumerate(self.layers):
                if self.want_tokens:
                    self._handles.append(
                        layer.register_forward_hook(self._token_hook(i)))
                if self._watched(i):
                    attn = self.attentions[i]
                    attn.attention_record = self.records[i]
                    self._fused.append((attn, attn.fused_attn))
                    if i in self.probs_layers:
                        attn.fused_attn = False
            if self.want_grids:
                self._register_grids()
            self._entered = True
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        """Remove every hook and restore the attentions; keep the records."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for attn, fused in self._fused:
            attn.attention_record = None
            attn.fused_attn = fused
        self._fused.clear()
        self._entered = False

    def clear(self) -> None:
        """Drop what was recorded so far, keeping the hooks."""
        self.records[:] = [
            LayerRecord(to_cpu=self.to_cpu) for _ in self.layers
        ]
        if self._entered:  # the attentions get the new records
            for i, record in enumerate(self.records):
                if self._watched(i):
                    self.attentions[i].attention_record = record
