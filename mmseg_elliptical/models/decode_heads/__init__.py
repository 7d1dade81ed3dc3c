from .mask2former_head import EllipticalMask2FormerHead
from .maskformer_head import EllipticalMaskFormerHead
from .mmdet_extra import MMDET_AVAILABLE, register_mmdet_placeholders
from .query_decoder import EllipticalQueryDecoderMixin
from .segmenter_mask_head import EllipticalMaskTransformerHead

__all__ = [
    'EllipticalMaskTransformerHead', 'EllipticalMask2FormerHead',
    'EllipticalMaskFormerHead', 'EllipticalQueryDecoderMixin',
    'MMDET_AVAILABLE', 'register_mmdet_placeholders'
]
