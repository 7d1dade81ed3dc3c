from .beit import EllipticalBEiTAttention, EllipticalMAEAttention
from .core import AttentionRecord, EllipticalAttentionMixin, relevance
from .multihead import (EllipticalAttention,
                        EllipticalEfficientMultiheadAttention,
                        EllipticalGlobalSubsampledAttention)
from .swin import EllipticalShiftWindowMSA, EllipticalWindowMSA

__all__ = [
    'AttentionRecord', 'EllipticalAttentionMixin', 'relevance',
    'EllipticalAttention', 'EllipticalEfficientMultiheadAttention',
    'EllipticalGlobalSubsampledAttention', 'EllipticalBEiTAttention',
    'EllipticalMAEAttention', 'EllipticalShiftWindowMSA', 'EllipticalWindowMSA'
]
