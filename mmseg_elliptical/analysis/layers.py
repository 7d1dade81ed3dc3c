"""The transformer layers of a segmentor's backbone or decode head."""
from dataclasses import dataclass
from typing import List, Optional

import torch.nn as nn
from mmengine.model import is_model_wrapper

from ..models import EllipticalTransformerMixin, to_elliptical


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


def transformer_layers(model: nn.Module,
                       part: str = 'backbone',
                       convert: bool = False) -> TransformerLayers:
    """Find the transformer layers of a segmentor's backbone or decode head.

    Works for mmseg's ``VisionTransformer`` / ``SegmenterMaskTransformerHead``
    and their elliptical subclasses.

    Args:
        model (nn.Module): An mmseg segmentor (e.g. ``EncoderDecoder``),
            possibly in a data-parallel wrapper.
        part (str): ``'backbone'`` or ``'decode_head'``.
        convert (bool): When the part is mmseg's own class, convert it in
            place to its elliptical version in dot-product mode
            (``to_elliptical(part, elliptical_layers=[])``): it computes the
            same, and its attentions can record probabilities and ``m``.
            Defaults to False.

    Returns:
        TransformerLayers: The layers and the patch token positions.
    """
    if is_model_wrapper(model):
        model = model.module
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
    if convert and not isinstance(module, EllipticalTransformerMixin):
        to_elliptical(module, elliptical_layers=[])
    if part == 'backbone':
        patches = slice(1, None) if getattr(module, 'with_cls_token',
                                            False) else slice(None)
        return TransformerLayers(part, list(layers), patches,
                                 getattr(module, 'patch_embed', None))
    num_classes = getattr(module, 'num_classes')
    return TransformerLayers(part, list(layers), slice(None, -num_classes))
