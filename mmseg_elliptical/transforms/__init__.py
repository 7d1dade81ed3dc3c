"""Data transforms registered in mmseg's ``TRANSFORMS``."""
from ..utils.choices import (COMMON_CORRUPTIONS, CORRUPTIONS,
                             EXTRA_CORRUPTIONS, SEVERITIES)
from .image_corruption import ImageCorruption, corrupt_image, corruption_seed

__all__ = [
    'COMMON_CORRUPTIONS', 'CORRUPTIONS', 'EXTRA_CORRUPTIONS', 'SEVERITIES',
    'ImageCorruption', 'corrupt_image', 'corruption_seed'
]
