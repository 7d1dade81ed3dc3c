from .attention import (AttentionRecord, EllipticalAttention,
                        EllipticalAttentionMixin,
                        EllipticalEfficientMultiheadAttention,
                        EllipticalGlobalSubsampledAttention, relevance)
from .backbones import (EllipticalMixVisionTransformer, EllipticalPCPVT,
                        EllipticalVisionTransformer)
from .conversion import to_elliptical
from .decode_heads import EllipticalMaskTransformerHead
from .layers import ValueChain, make_elliptical

__all__ = [
    'AttentionRecord', 'EllipticalAttention', 'EllipticalAttentionMixin',
    'EllipticalEfficientMultiheadAttention',
    'EllipticalGlobalSubsampledAttention', 'relevance',
    'EllipticalVisionTransformer', 'EllipticalMixVisionTransformer',
    'EllipticalPCPVT', 'EllipticalMaskTransformerHead', 'ValueChain',
    'make_elliptical', 'to_elliptical'
]
