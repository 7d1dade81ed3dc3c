"""mmseg's MaskFormer head with elliptical query self-attention."""
from mmseg.models.decode_heads import MaskFormerHead
from mmseg.registry import MODELS

from ..conversion import register_elliptical_version
from .query_decoder import EllipticalQueryDecoderMixin


@MODELS.register_module()
@register_elliptical_version(MaskFormerHead)
class EllipticalMaskFormerHead(EllipticalQueryDecoderMixin, MaskFormerHead):
    """mmseg's ``MaskFormerHead`` with elliptical query self-attention
    (needs mmdet; docs/models.md).

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """
