"""Record what transformer layers compute, on demand.

Nothing here touches a model until :class:`LayerRecorder` is entered; on exit
every hook and record is removed and every attention is back on its fused
path, so a model outside the ``with`` block runs exactly as it would without
this module (no statistics, no global state).
"""
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import torch.nn as nn
from torch import Tensor

from ..models import AttentionRecord, EllipticalAttentionMixin


@dataclass
class LayerRecord(AttentionRecord):
    """What one layer computed, one entry per forward call since the last
    :meth:`LayerRecorder.clear`.

    Attributes:
        tokens (list[Tensor]): Output tokens ``[B, N, C]`` (of ``layer.ffn``).
        probs (list[Tensor]): Attention probabilities ``[B, H, N, N]``.
        relevance (list[Tensor]): ``m`` ``[B, H, 1, d]`` of the calls that
            scored elliptically (none for dot-product layers).
    """
    tokens: List[Tensor] = field(default_factory=list)


class LayerRecorder:
    """Context manager recording tokens, probabilities and ``m`` of layers.

    Example::

        found = transformer_layers(model, convert=True)
        with LayerRecorder(found.layers, probs=True, relevance=True) as rec:
            model.test_step(batch)
        last_tokens = rec.records[-1].tokens[0]

    Args:
        layers (Sequence[nn.Module]): mmseg ``TransformerEncoderLayer`` s
            (with ``attn`` and ``ffn``); elliptical ones (see
            :func:`~.layers.transformer_layers`) for ``probs`` and
            ``relevance``.
        tokens (bool): Record every layer's output tokens. Defaults to True.
        probs (bool): Record the attention probabilities: the attentions run
            their explicit path inside the block. Defaults to False.
        relevance (bool): Record ``m`` of elliptical layers. Defaults to False.
        patch_embed (nn.Module, optional): Also record the patch grid shape
            ``(h, w)`` this module returns, in :attr:`hw_shapes`.
        to_cpu (bool): Move recorded tensors to the CPU. Defaults to False.
    """

    def __init__(self,
                 layers: Sequence[nn.Module],
                 tokens: bool = True,
                 probs: bool = False,
                 relevance: bool = False,
                 patch_embed: Optional[nn.Module] = None,
                 to_cpu: bool = False) -> None:
        self.layers = list(layers)
        self.want_tokens = tokens
        self.want_probs = probs
        self.want_attention = probs or relevance
        self.patch_embed = patch_embed
        self.to_cpu = to_cpu
        if self.want_attention:
            plain = [
                type(layer.attn).__name__ for layer in self.layers
                if not isinstance(layer.attn, EllipticalAttentionMixin)
            ]
            if plain:
                raise TypeError(
                    f'Recording probabilities or m needs elliptical '
                    f'attentions, got {plain}; find the layers with '
                    'transformer_layers(model, part, convert=True).')
        self.records: List[LayerRecord] = []
        self.hw_shapes: List[Tuple[int, int]] = []
        self._handles: List[Any] = []
        self._fused: List[bool] = []
        self.clear()

    def _token_hook(self, index: int):

        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            self.records[index].keep('tokens', output)

        return hook

    def _patch_hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.hw_shapes.append(tuple(int(s) for s in output[1]))

    def __enter__(self) -> 'LayerRecorder':
        try:
            for i, layer in enumerate(self.layers):
                if self.want_tokens:
                    self._handles.append(
                        layer.ffn.register_forward_hook(self._token_hook(i)))
                if self.want_attention:
                    layer.attn.attention_record = self.records[i]
                    self._fused.append(layer.attn.fused_attn)
                    if self.want_probs:
                        layer.attn.fused_attn = False
            if self.patch_embed is not None:
                self._handles.append(
                    self.patch_embed.register_forward_hook(self._patch_hook))
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        """Remove every hook and restore the attentions (idempotent);
        records are kept."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for layer, fused in zip(self.layers, self._fused):
            layer.attn.attention_record = None
            layer.attn.fused_attn = fused
        self._fused.clear()

    def clear(self) -> None:
        """Drop what was recorded so far, keeping the hooks."""
        self.records[:] = [
            LayerRecord(to_cpu=self.to_cpu) for _ in self.layers
        ]
        for layer, record in zip(self.layers, self.records):
            if self._fused:  # inside the block: attentions get the new ones
                layer.attn.attention_record = record
        self.hw_shapes = []
