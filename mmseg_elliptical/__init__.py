"""mmseg-elliptical: Elliptical Attention for MMSegmentation 1.x.

Importing the package registers every component in mmseg's registries
(models, datasets, transforms, metrics, hooks); configs load it with
``custom_imports = dict(imports=['mmseg_elliptical'])``.

Its other effects: mmengine's loader for local checkpoint files is replaced
by a weights-only loader that also allows the objects mmengine itself pickles
(torch >= 2.6 refuses them otherwise), logged once. Set the environment
variable ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER=0`` to keep mmengine's loader, or
call :func:`mmseg_elliptical.engine.unregister_checkpoint_loader`; see
:mod:`mmseg_elliptical.engine.checkpoint`. And, only when mmdet is not
installed: mmseg's ``MaskFormerHead`` and ``Mask2FormerHead``, which mmseg then
silently bases on ``BaseModule`` (unbuildable: ``unexpected keyword argument
'in_channels'``), are replaced in mmseg's ``MODELS`` by placeholders that raise
an ``ImportError`` naming the ``mmdet`` extra; see
:mod:`mmseg_elliptical.models.decode_heads.mmdet_extra`.
"""
from . import datasets, engine, evaluation, models, transforms  # noqa: F401
from .engine import register_checkpoint_loader
from .models.decode_heads import register_mmdet_placeholders

__version__ = '0.1.0'

register_checkpoint_loader()
register_mmdet_placeholders()
