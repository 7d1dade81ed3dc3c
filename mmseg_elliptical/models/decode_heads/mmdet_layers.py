"""mmdet's transformer decoder layers in a value chain (needs mmdet): the
query self-attention is chained, the cross-attention stays mmdet's."""
from mmdet.models.layers.transformer import DetrTransformerDecoderLayer
from mmdet.models.layers.transformer import \
    Mask2FormerTransformerDecoderLayer as Mask2FormerDecoderLayer
from torch import Tensor

from ..attention import EllipticalAttention  # noqa: F401  (registers it)
from ..chain import EllipticalLayerMixin
from ..conversion import register_elliptical_version


class EllipticalDecoderLayerMixin(EllipticalLayerMixin):
    """An mmdet decoder layer whose query self-attention is chained."""
    ATTENTION = 'self_attn'

    def forward(self, query: Tensor, *args, **kwargs) -> Tensor:
        # mmdet's heads pass the queries by keyword.
        return super().forward(query, *args, **kwargs)


@register_elliptical_version(Mask2FormerDecoderLayer)
class EllipticalMask2FormerDecoderLayer(EllipticalDecoderLayerMixin,
                                        Mask2FormerDecoderLayer):
    """Mask2Former's decoder layer (masked cross-attention, query
    self-attention, FFN) in a chain."""


@register_elliptical_version(DetrTransformerDecoderLayer)
class EllipticalDetrDecoderLayer(EllipticalDecoderLayerMixin,
                                 DetrTransformerDecoderLayer):
    """DETR's decoder layer (query self-attention, cross-attention, FFN;
    MaskFormer's) in a chain."""
