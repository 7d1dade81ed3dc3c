from .elliptical_vit import EllipticalVisionTransformer

__all__ = ['EllipticalVisionTransformer']
