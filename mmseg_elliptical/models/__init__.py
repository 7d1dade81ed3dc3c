from .backbones import EllipticalVisionTransformer
from .decode_heads import EllipticalMaskTransformerHead
from .elliptical_attention import EllipticalAttention, relevance

__all__ = [
    'EllipticalAttention', 'relevance', 'EllipticalVisionTransformer',
    'EllipticalMaskTransformerHead'
]
