"""mmseg-elliptical: Elliptical Attention for MMSegmentation 1.x.

Importing the package registers every component in mmseg's registries
(models, datasets, transforms, metrics, hooks); configs load it with
``custom_imports = dict(imports=['mmseg_elliptical'])``.

Its one other effect: mmengine's loader for local checkpoint files is replaced
by a weights-only loader that also allows the objects mmengine itself pickles
(torch >= 2.6 refuses them otherwise), logged once. Set the environment
variable ``MMSEG_ELLIPTICAL_CHECKPOINT_LOADER=0`` to keep mmengine's loader, or
call :func:`mmseg_elliptical.engine.unregister_checkpoint_loader`; see
:mod:`mmseg_elliptical.engine.checkpoint`.
"""
from . import datasets, engine, evaluation, models, transforms  # noqa: F401
from .engine import register_checkpoint_loader

__version__ = '0.1.0'

register_checkpoint_loader()
