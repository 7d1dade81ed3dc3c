"""The transformer layers of a segmentor's backbone or decode head.

Found through the models' own declarations, nothing else:
:meth:`~mmseg_elliptical.models.transformer.EllipticalTransformerMixin.layer_stages`
(the layers of each stage, in forward order, as the value chain uses them)
and :meth:`~mmseg_elliptical.models.transformer.EllipticalTransformerMixin.token_layout`
(how each stage's tokens lie on the image). An mmseg class with an
elliptical version (``ELLIPTICAL_VERSIONS``) is read through that version's
declarations, so a new family needs no edit here.
"""  # noqa: E501
from dataclasses import dataclass
from typing import List

import torch.nn as nn
from mmengine.model import is_model_wrapper
from torch import Tensor

from ..errors import AnalysisError  # noqa: F401
from ..models.conversion import (ELLIPTICAL_VERSIONS, elliptical_version,
                                 to_elliptical)
from ..models.transformer import PARTS, EllipticalTransformerMixin, TokenLayout


@dataclass
class TransformerLayers:
    """The transformer layers of one model part and how their tokens lie.

    Attributes:
        part (str): ``'backbone'`` or ``'decode_head'``.
        module (nn.Module): The part (backbone or head).
        layers (list[nn.Module]): Every layer, in forward order across
            stages (global indices, as ``elliptical_layers`` counts them).
        stages (list[int]): The stage of each layer.
        layouts (list[TokenLayout]): The token layout of each stage.
    """
    part: str
    module: nn.Module
    layers: List[nn.Module]
    stages: List[int]
    layouts: List[TokenLayout]

    def layout(self, index: int) -> TokenLayout:
        """The token layout of layer ``index``."""
        return self.layouts[self.stages[index]]

    def attention(self, index: int) -> nn.Module:
        """The attention of layer ``index`` that the value chain reads
        (``EllipticalLayerMixin.ATTENTION``: ``attn``, Mask2Former's
        ``self_attn``)."""
        layer = self.layers[index]
        name = getattr(layer, 'ATTENTION', None) or elliptical_version(
            type(layer)).ATTENTION
        return getattr(layer, name)

    def counted_tokens(self, index: int, tokens: Tensor) -> Tensor:
        """The tokens of layer ``index`` that collapse is measured on: the
        grid tokens (cls token and class embeddings left out), or all of
        them when they are no image grid.

        Args:
            index (int): Layer index.
            tokens (Tensor): Its output ``[B, N, C]``.

        Returns:
            Tensor: ``[B, N', C]``.
        """
        layout = self.layout(index)
        return tokens[:, layout.prefix:tokens.shape[1] - layout.suffix]


def supported_parts() -> List[str]:
    """Names of the mmseg classes (and their elliptical versions) whose
    layers the analysis finds."""
    return sorted(f'{src.__name__} / {cls.__name__}'
                  for src, cls in ELLIPTICAL_VERSIONS.items()
                  if elliptical_version(src, EllipticalTransformerMixin))


def transformer_layers(model: nn.Module,
                       part: str = 'backbone',
                       convert: bool = False) -> TransformerLayers:
    """Find the transformer layers of a segmentor's backbone or decode head.

    Args:
        model (nn.Module): An mmseg segmentor (e.g. ``EncoderDecoder``),
            possibly in a data-parallel wrapper.
        part (str): ``'backbone'`` or ``'decode_head'``.
        convert (bool): When the part is mmseg's own class, convert it in
            place to its elliptical version in dot-product mode
            (``to_elliptical(part, elliptical_layers=[])``): it computes the
            same, and its attentions can record probabilities and ``m``.
            Defaults to False (mmseg's class is read through its elliptical
            version's declarations, unchanged).

    Returns:
        TransformerLayers: The layers, their stages and token layouts.

    Raises:
        ValueError: An unknown part, or one without an elliptical version.
    """
    if is_model_wrapper(model):
        model = model.module
    if part not in PARTS:
        raise ValueError(f'part={part!r} must be "backbone" or "decode_head".')
    module = getattr(model, part, None)
    if isinstance(module, EllipticalTransformerMixin):
        cls = type(module)  # also a subclass that registered no version
    else:
        cls = None if module is None else elliptical_version(
            type(module), EllipticalTransformerMixin)
    if cls is None:
        raise AnalysisError(
            f'The model\'s {part} ({type(module).__name__}) has no '
            'elliptical version, so its transformer layers are unknown; the '
            f'analysis supports {", ".join(supported_parts())}.')
    if convert and not isinstance(module, EllipticalTransformerMixin):
        to_elliptical(module, elliptical_layers=[])
    stages = cls.layer_stages(module)
    layouts = cls.token_layout(module)
    if len(layouts) != len(stages):
        raise ValueError(
            f'{cls.__name__}.token_layout() declares {len(layouts)} stages, '
            f'layer_stages() {len(stages)}: declare one TokenLayout per '
            'stage.')
    layers, stage_of = [], []
    for s, stage in enumerate(stages):
        layers += list(stage)
        stage_of += [s] * len(stage)
    return TransformerLayers(part, module, layers, stage_of, list(layouts))
