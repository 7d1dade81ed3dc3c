"""mmseg's Mask2Former head with elliptical query self-attention."""
from mmseg.models.decode_heads import Mask2FormerHead
from mmseg.registry import MODELS

from ..conversion import register_elliptical_version
from .query_decoder import EllipticalQueryDecoderMixin


@MODELS.register_module()
@register_elliptical_version(Mask2FormerHead)
class EllipticalMask2FormerHead(EllipticalQueryDecoderMixin, Mask2FormerHead):
    """mmseg's ``Mask2FormerHead`` with elliptical query self-attention
    (needs mmdet; docs/models.md).

    Args:
        **kwargs: Arguments of mmseg's class and of
            :class:`~..transformer.EllipticalTransformerMixin`.
    """
