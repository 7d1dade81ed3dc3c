from .adaptive import adaptive_relevance
from .beit import EllipticalBEiTAttention, EllipticalMAEAttention
from .core import EllipticalAttentionMixin, relevance
from .multihead import (EllipticalAttention,
                        EllipticalEfficientMultiheadAttention,
                        EllipticalGlobalSubsampledAttention)
from .policy import scaling
from .swin import EllipticalShiftWindowMSA, EllipticalWindowMSA
from .utils import AttentionRecord, relative_position_bias

__all__ = [
    'AttentionRecord', 'EllipticalAttentionMixin', 'adaptive_relevance',
    'relevance', 'scaling', 'relative_position_bias', 'EllipticalAttention',
    'EllipticalEfficientMultiheadAttention',
    'EllipticalGlobalSubsampledAttention', 'EllipticalBEiTAttention',
    'EllipticalMAEAttention', 'EllipticalShiftWindowMSA', 'EllipticalWindowMSA'
]
