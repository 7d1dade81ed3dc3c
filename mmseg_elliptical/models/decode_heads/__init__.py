from .segmenter_mask_head import EllipticalMaskTransformerHead

__all__ = ['EllipticalMaskTransformerHead']
