"""Forward hooks that record what transformer layers compute, on demand.

Nothing here touches a model until :class:`LayerRecorder` is entered; on exit
every hook is removed, so a model outside the ``with`` block runs exactly as
it would without this module (no statistics, no global state).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch.nn as nn
from torch import Tensor

from ..models.elliptical_attention import EllipticalAttention


@dataclass
class TransformerLayers:
    """The transformer layers of one model part and where its patches are.

    Attributes:
        part (str): ``'backbone'`` or ``'decode_head'``.
        layers (list[nn.Module]): mmseg ``TransformerEncoderLayer`` s, in order.
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


@dataclass
class LayerRecord:
    """What one layer computed, one entry per forward call since the last
    :meth:`LayerRecorder.clear`.

    Attributes:
        tokens (list[Tensor]): Output tokens ``[B, N, C]`` (of ``layer.ffn``).
        attn_inputs (list[Tensor]): Normalised attention inputs ``[B, N, C]``.
        v_prev (list[Tensor or None]): Previous layer's values passed to an
            elliptical attention (None for dot-product layers).
        relevance (list[Tensor or None]): ``m`` of shape ``[B, H, 1, d]``, None
            where the layer scores by dot product.
    """
    tokens: List[Tensor] = field(default_factory=list)
    attn_inputs: List[Tensor] = field(default_factory=list)
    v_prev: List[Optional[Tensor]] = field(default_factory=list)
    relevance: List[Optional[Tensor]] = field(default_factory=list)


class LayerRecorder:
    """Context manager recording tokens, attention inputs and ``m`` of layers.

    Example::

        found = transformer_layers(model)
        with LayerRecorder(found.layers, relevance=True) as rec:
            model.test_step(batch)
        last_tokens = rec.records[-1].tokens[0]

    Args:
        layers (Sequence[nn.Module]): mmseg ``TransformerEncoderLayer`` s
            (with ``attn`` and ``ffn``).
        tokens (bool): Record every layer's output tokens. Defaults to True.
        attn_inputs (bool): Record the normalised inputs of the attention
            and, for elliptical attention, the previous values (needed to
            recompute attention maps). Defaults to False.
        relevance (bool): Record ``m`` of elliptical layers. Defaults to False.
        patch_embed (nn.Module, optional): Also record the patch grid shape
            ``(h, w)`` this module returns, in :attr:`hw_shapes`.
        to_cpu (bool): Move recorded tensors to the CPU. Defaults to False.
    """

    def __init__(self,
                 layers: Sequence[nn.Module],
                 tokens: bool = True,
                 attn_inputs: bool = False,
                 relevance: bool = False,
                 patch_embed: Optional[nn.Module] = None,
                 to_cpu: bool = False) -> None:
        self.layers = list(layers)
        self.want_tokens = tokens
        self.want_inputs = attn_inputs
        self.want_relevance = relevance
        self.patch_embed = patch_embed
        self.to_cpu = to_cpu
        self.records: List[LayerRecord] = [LayerRecord() for _ in self.layers]
        self.hw_shapes: List[Tuple[int, int]] = []
        self._handles: List[Any] = []

    def _keep(self, t: Optional[Tensor]) -> Optional[Tensor]:
        if t is None:
            return None
        t = t.detach()
        return t.cpu() if self.to_cpu else t

    def _token_hook(self, index: int):

        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            self.records[index].tokens.append(self._keep(output))

        return hook

    def _attn_hook(self, index: int):

        def hook(module: nn.Module, args: tuple, kwargs: Dict,
                 output: Any) -> None:
            record = self.records[index]
            query = args[0] if args else kwargs['query']
            v_prev = kwargs.get('v_prev')
            if self.want_inputs:
                record.attn_inputs.append(self._keep(query))
                record.v_prev.append(self._keep(v_prev))
            if self.want_relevance:
                m = None
                if isinstance(module, EllipticalAttention):
                    m = module.relevance(output[1], v_prev)
                record.relevance.append(self._keep(m))

        return hook

    def _patch_hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.hw_shapes.append(tuple(int(s) for s in output[1]))

    def __enter__(self) -> 'LayerRecorder':
        try:
            for i, layer in enumerate(self.layers):
                if self.want_tokens:
                    self._handles.append(
                        layer.ffn.register_forward_hook(self._token_hook(i)))
                if self.want_inputs or self.want_relevance:
                    self._handles.append(
                        layer.attn.register_forward_hook(
                            self._attn_hook(i), with_kwargs=True))
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
        """Remove every hook (idempotent); records are kept."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def clear(self) -> None:
        """Drop what was recorded so far, keeping the hooks."""
        self.records = [LayerRecord() for _ in self.layers]
        self.hw_shapes = []
