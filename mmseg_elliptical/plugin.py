"""What ``import mmseg_elliptical`` does: every component registered in
mmseg's registries, the weights-only checkpoint loader (docs/reliability.md)
and, without mmdet, placeholders for mmseg's MaskFormer heads
(docs/models.md)."""
from . import datasets, engine, evaluation, models, transforms  # noqa: F401
from .engine import register_checkpoint_loader
from .models.decode_heads import register_mmdet_placeholders

register_checkpoint_loader()
register_mmdet_placeholders()
