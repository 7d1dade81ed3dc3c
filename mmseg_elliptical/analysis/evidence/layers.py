"""The transformer layers of a segmentor's backbone or decode head, found
through the models' own ``layer_stages()`` and ``token_layout()``."""
from dataclasses import dataclass
from typing import List

import torch.nn as nn
from mmengine.model import is_model_wrapper
from torch import Tensor

from ...errors import AnalysisError
from ...models.conversion import (ELLIPTICAL_VERSIONS, elliptical_version,
                                  to_elliptical)
from ...models.transformer import (PARTS, EllipticalTransformerMixin,
                                   TokenLayout)


@dataclass
class TransformerLayers:
    """The transformer layers of one model part and how their tokens lie.

    Attributes:
        part (str): ``'backbone'`` or ``'decode_head'``.
        module (nn.Module): The part.
        layers (list[nn.Module]): Every layer, in forward order across
            stages.
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
        """The chained attention of layer ``index``."""
        layer = self.layers[index]
        name = getattr(layer, 'ATTENTION', None) or elliptical_version(
            type(layer)).ATTENTION
        return getattr(layer, name)

    def counted_tokens(self, index: int, tokens: Tensor) -> Tensor:
        """The tokens ``[B, N', C]`` of layer ``index``'s output that
        collapse is measured on (prefix and suffix left out)."""
        layout = self.layout(index)
        return tokens[:, layout.prefix:tokens.shape[1] - layout.suffix]


def supported_parts() -> List[str]:
    """Names of the classes whose layers the analysis finds."""
    return sorted(f'{src.__name__} / {cls.__name__}'
                  for src, cls in ELLIPTICAL_VERSIONS.items()
                  if elliptical_version(src, EllipticalTransformerMixin))


def transformer_layers(model: nn.Module,
                       part: str = 'backbone',
                       convert: bool = False) -> TransformerLayers:
    """Find the transformer layers of a segmentor's backbone or decode head.

    Args:
        model (nn.Module): An mmseg segmentor, possibly wrapped.
        part (str): ``'backbone'`` or ``'decode_head'``.
        convert (bool): Convert mmseg's own class in place to its
            elliptical version with ``elliptical_layers=[]`` (the same
            outputs), so its attentions can record.

    Raises:
        ValueError: An unknown part.
        AnalysisError: A part without an elliptical version.
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
