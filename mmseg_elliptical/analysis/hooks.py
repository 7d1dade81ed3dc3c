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

from ..models import EllipticalAttentionMixin, to_elliptical
from ..models.attention.core import AttentionRecord
from ..models.layers import EllipticalTransformerMixin


@dataclass
class TransformerLayers:
    """The transformer layers of one model part and where its patches are.

    Attributes:
        part (str): ``'backbone'`` or ``'decode_head'``.
        layers (list[nn.Module]): mmseg ``TransformerEncoderLayer`` s, in
            order.
        patch_slice (slice): Token positions of the image patches in the
            layers' ``[B, N, C]`` tokens (skips the backbone's cls token or
            the head's class embeddings).
        patch_embed (nn.Module, optional): The backbone's patch embedding,
            whose output carries the patch grid shape.
    """
    part: str
    layers: List[nn.Module]
    patch_slice: slice
    patch_embed: Optional[nn.Module] = None


def unwrap(model: nn.Module) -> nn.Module:
    """The segmentor inside a (distributed) data-parallel wrapper."""
    return getattr(model, 'module', model)


def transformer_layers(model: nn.Module,
                       part: str = 'backbone') -> TransformerLayers:
    """Find the transformer layers of a segmentor's backbone or decode head.

    Works for mmseg's ``VisionTransformer`` / ``SegmenterMaskTransformerHead``
    and their elliptical subclasses.

    Args:
        model (nn.Module): An mmseg segmentor (e.g. ``EncoderDecoder``).
        part (str): ``'backbone'`` or ``'decode_head'``.

    Returns:
        TransformerLayers: The layers and the patch token positions.
    """
    model = unwrap(model)
    if part not in ('backbone', 'decode_head'):
        raise ValueError(f'part={part!r} must be "backbone" or "decode_head".')
    module = getattr(model, part, None)
    layers = getattr(module, 'layers', None)
    if module is None or layers is None or not all(
            hasattr(layer, 'attn') and hasattr(layer, 'ffn')
            for layer in layers):
        raise ValueError(
            f'The model\'s {part} ({type(module).__name__}) has no '
            'transformer layers with `attn` and `ffn`: these tools support '
            'mmseg\'s VisionTransformer and SegmenterMaskTransformerHead and '
            'their elliptical versions.')
    if part == 'backbone':
        patches = slice(1, None) if getattr(module, 'with_cls_token',
                                            False) else slice(None)
        return TransformerLayers(part, list(layers), patches,
                                 getattr(module, 'patch_embed', None))
    num_classes = getattr(module, 'num_classes')
    return TransformerLayers(part, list(layers), slice(None, -num_classes))


def as_elliptical(module: nn.Module) -> nn.Module:
    """``module`` itself, converted in place to its elliptical version in
    dot-product mode (``elliptical_layers=[]``) if it is mmseg's own.

    The model computes the same; its attentions can now record their
    probabilities through the explicit path.
    """
    if not isinstance(module, EllipticalTransformerMixin):
        to_elliptical(module, elliptical_layers=[])
    return module


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

        found = transformer_layers(model)
        with LayerRecorder(found.layers, probs=True, relevance=True) as rec:
            model.test_step(batch)
        last_tokens = rec.records[-1].tokens[0]

    Args:
        layers (Sequence[nn.Module]): mmseg ``TransformerEncoderLayer`` s
            (with ``attn`` and ``ffn``); elliptical ones (see
            :func:`as_elliptical`) for ``probs`` and ``relevance``.
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
            plain = [type(layer.attn).__name__ for layer in self.layers
                     if not isinstance(layer.attn, EllipticalAttentionMixin)]
            if plain:
                raise TypeError(
                    f'Recording probabilities or m needs elliptical '
                    f'attentions, got {plain}; convert mmseg\'s model first '
                    'with mmseg_elliptical.analysis.as_elliptical(backbone).')
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
        self.records[:] = [LayerRecord(to_cpu=self.to_cpu)
                           for _ in self.layers]
        for layer, record in zip(self.layers, self.records):
            if self._fused:  # inside the block: attentions get the new ones
                layer.attn.attention_record = record
        self.hw_shapes = []
