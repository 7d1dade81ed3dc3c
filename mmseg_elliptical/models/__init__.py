from .attention import (AttentionRecord, EllipticalAttention,
                        EllipticalAttentionMixin, EllipticalBEiTAttention,
                        EllipticalEfficientMultiheadAttention,
                        EllipticalGlobalSubsampledAttention,
                        EllipticalMAEAttention, EllipticalShiftWindowMSA,
                        relevance)
from .backbones import (EllipticalBEiT, EllipticalMAE,
                        EllipticalMixVisionTransformer, EllipticalPCPVT,
                        EllipticalSwinTransformer,
                        EllipticalVisionTransformer)
from .conversion import to_elliptical
from .decode_heads import EllipticalMaskTransformerHead
from .layers import ValueChain, make_elliptical

__all__ = [
    'AttentionRecord', 'EllipticalAttention', 'EllipticalAttentionMixin',
    'EllipticalEfficientMultiheadAttention',
    'EllipticalGlobalSubsampledAttention', 'EllipticalBEiTAttention',
    'EllipticalMAEAttention', 'EllipticalShiftWindowMSA', 'relevance',
    'EllipticalVisionTransformer', 'EllipticalMixVisionTransformer',
    'EllipticalPCPVT', 'EllipticalSwinTransformer', 'EllipticalBEiT',
    'EllipticalMAE', 'EllipticalMaskTransformerHead', 'ValueChain',
    'make_elliptical', 'to_elliptical'
]
