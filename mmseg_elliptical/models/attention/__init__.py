from .core import (AttentionRecord, EllipticalAttentionMixin, relevance)
from .multihead import (EllipticalAttention,
                        EllipticalEfficientMultiheadAttention,
                        EllipticalGlobalSubsampledAttention)

__all__ = [
    'AttentionRecord', 'EllipticalAttentionMixin', 'relevance',
    'EllipticalAttention', 'EllipticalEfficientMultiheadAttention',
    'EllipticalGlobalSubsampledAttention'
]
