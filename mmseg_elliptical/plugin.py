"""What ``import mmseg_elliptical`` does: every component registered in
mmseg's registries, the weights-only checkpoint loader (docs/reliability.md)
and, without mmdet, placeholders for mmseg's MaskFormer heads
(docs/models.md)."""
from . import datasets, engine, evaluation, models, transforms  # noqa: F401
from .engine import register_checkpoint_loader
from .models.decode_heads import register_mmdet_placeholders
# The robustness grid's test loops (mmseg's LOOPS).
from .robustness.attacks import pgd, transfer  # noqa: F401
from .robustness.certification import loop as certify_loop  # noqa: F401
from .robustness.grid import loop as grid_loop  # noqa: F401

register_checkpoint_loader()
register_mmdet_placeholders()
