from .mit import EllipticalMixVisionTransformer
from .twins import EllipticalPCPVT
from .vit import EllipticalVisionTransformer

__all__ = [
    'EllipticalVisionTransformer', 'EllipticalMixVisionTransformer',
    'EllipticalPCPVT'
]
