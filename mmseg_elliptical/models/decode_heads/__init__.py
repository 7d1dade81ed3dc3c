from .elliptical_mask_head import EllipticalMaskTransformerHead

__all__ = ['EllipticalMaskTransformerHead']
