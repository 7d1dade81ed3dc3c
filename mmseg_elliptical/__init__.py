"""mmseg-elliptical: Elliptical Attention for MMSegmentation 1.x.

Importing the package registers every component in mmseg's registries, and
installs the weights-only checkpoint loader (docs/reliability.md) and, without
mmdet, placeholders for mmseg's MaskFormer heads (docs/models.md).
"""
from . import _quiet  # noqa: F401 (first: before mmengine is imported)

# isort: split
from . import datasets, engine, evaluation, models, transforms  # noqa: F401
from .engine import register_checkpoint_loader
from .models.decode_heads import register_mmdet_placeholders

__version__ = '0.1.0'

register_checkpoint_loader()
register_mmdet_placeholders()
