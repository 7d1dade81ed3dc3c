"""mmseg's Segmenter mask-transformer head with elliptical attention."""
from typing import List, Sequence

import torch.nn as nn
from mmseg.models.decode_heads import SegmenterMaskTransformerHead
from mmseg.registry import MODELS

from ..backbones.vit import EllipticalViTLayer  # noqa: F401  (registers it)
from ..checks import InputError, count_non_finite, looks_at_values
from ..conversion import register_elliptical_version
from ..transformer import EllipticalTransformerMixin, TokenLayout


@MODELS.register_module()
@register_elliptical_version(SegmenterMaskTransformerHead)
class EllipticalMaskTransformerHead(EllipticalTransformerMixin,
                                    SegmenterMaskTransformerHead):
    """mmseg's Segmenter mask transformer with elliptical attention; its
    layer 0 stays dot-product (the backbone's values cover other tokens).

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """

    def layer_stages(self) -> List[Sequence[nn.Module]]:
        return [self.layers]

    def token_layout(self) -> List[TokenLayout]:
        """The backbone's patch tokens, then the class embeddings."""
        return [TokenLayout(grid='backbone', suffix=self.num_classes)]

    def input_channels(self) -> int:
        return self.in_channels

    def check_inputs(self, inputs) -> None:
        """Reject a feature map of other channels, and (as the backbones'
        ``check_finite`` says) non-finite features."""
        x = self._transform_inputs(inputs)
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise InputError(
                f'{type(self).__name__}: in_channels={self.in_channels} but '
                f'the input feature map has shape {tuple(x.shape)}; set '
                'decode_head.in_channels to the backbone\'s embed_dims.')
        if looks_at_values(x, self.check_finite) and count_non_finite(x):
            raise InputError(
                f'{type(self).__name__}: the backbone\'s features contain NaN '
                'or infinite values; check the backbone and the input '
                "(e.g. fp16 overflow), or set decode_head.check_finite='never'"
                '.')
