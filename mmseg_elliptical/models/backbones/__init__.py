from .beit import EllipticalBEiT
from .mae import EllipticalMAE
from .mit import EllipticalMixVisionTransformer
from .swin import EllipticalSwinTransformer
from .twins import EllipticalPCPVT
from .vit import EllipticalVisionTransformer

__all__ = [
    'EllipticalVisionTransformer', 'EllipticalMixVisionTransformer',
    'EllipticalPCPVT', 'EllipticalSwinTransformer', 'EllipticalBEiT',
    'EllipticalMAE'
]
