"""mmseg-elliptical: Elliptical Attention for MMSegmentation 1.x.

Importing the package registers every component in mmseg's registries; configs
load it with ``custom_imports = dict(imports=['mmseg_elliptical'])``.
"""
from . import datasets, demo, models, transforms  # noqa: F401
from .utils import register_checkpoint_loader

__version__ = '0.1.0'

register_checkpoint_loader()
