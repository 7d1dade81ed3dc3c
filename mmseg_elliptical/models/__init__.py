"""The elliptical attentions, backbones and heads (registered in mmseg's
``MODELS``), the value chain and the in-place conversion."""
from .attention import (AttentionRecord, EllipticalAttention,
                        EllipticalAttentionMixin, EllipticalBEiTAttention,
                        EllipticalEfficientMultiheadAttention,
                        EllipticalGlobalSubsampledAttention,
                        EllipticalMAEAttention, EllipticalShiftWindowMSA,
                        adaptive_relevance, relevance)
from .backbones import (EllipticalBEiT, EllipticalMAE,
                        EllipticalMixVisionTransformer, EllipticalPCPVT,
                        EllipticalSwinTransformer, EllipticalVisionTransformer)
from .chain import EllipticalLayerMixin, ValueChain
from .checks import ConfigError, InputError, UnknownArgumentError
from .conversion import ConversionError, elliptical_version, to_elliptical
from .decode_heads import (EllipticalMask2FormerHead, EllipticalMaskFormerHead,
                           EllipticalMaskTransformerHead)
from .transformer import PARTS, EllipticalTransformerMixin, chain_stages

__all__ = [
    'AttentionRecord', 'EllipticalAttention', 'EllipticalAttentionMixin',
    'EllipticalEfficientMultiheadAttention',
    'EllipticalGlobalSubsampledAttention', 'EllipticalBEiTAttention',
    'EllipticalMAEAttention', 'EllipticalShiftWindowMSA', 'adaptive_relevance',
    'relevance', 'EllipticalVisionTransformer',
    'EllipticalMixVisionTransformer', 'EllipticalPCPVT',
    'EllipticalSwinTransformer', 'EllipticalBEiT', 'EllipticalMAE',
    'EllipticalMaskTransformerHead', 'EllipticalMask2FormerHead',
    'EllipticalMaskFormerHead', 'EllipticalLayerMixin', 'ValueChain',
    'ConfigError', 'InputError', 'UnknownArgumentError', 'ConversionError',
    'elliptical_version', 'to_elliptical', 'PARTS',
    'EllipticalTransformerMixin', 'chain_stages'
]
