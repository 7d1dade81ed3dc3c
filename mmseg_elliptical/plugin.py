"""The plugin's registration: every component in mmseg's registries, the
weights-only checkpoint loader (docs/reliability.md) and, without mmdet,
placeholders for mmseg's MaskFormer heads (docs/models.md).

``import mmseg_elliptical`` (every config's ``custom_imports``) imports this
module; a tool that checks its command line first imports it itself, once
the arguments have passed (:mod:`mmseg_elliptical`'s docstring).
"""
from . import datasets, engine, evaluation, models, transforms  # noqa: F401
from .engine import register_checkpoint_loader
from .models.decode_heads import register_mmdet_placeholders

register_checkpoint_loader()
register_mmdet_placeholders()
