"""mmdet, the optional extra of the MaskFormer and Mask2Former heads: a
clear ``ImportError`` without it (mmseg issue #2914, docs/models.md)."""
from typing import Dict

from mmengine.model import BaseModule
from mmseg.models.decode_heads import Mask2FormerHead, MaskFormerHead
from mmseg.registry import MODELS

# the version that installs beside mmcv 2.1.0 and mmseg 1.2.2
MMDET_VERSION = '3.3.0'

# mmseg's own decision: the head has mmdet's base, or the fallback.
MMDET_AVAILABLE = MaskFormerHead.__bases__ != (BaseModule, ) \
    and Mask2FormerHead.__bases__ != (BaseModule, )


def mmdet_hint(owner: str) -> str:
    """The message of a head that cannot be built without mmdet."""
    return (
        f'{owner} needs mmdet, which is not installed (mmseg\'s MaskFormer '
        'and Mask2Former heads subclass mmdet\'s). Install the plugin\'s '
        "extra: pip install -e '.[mmdet]' in its checkout (or pip install "
        f'mmdet=={MMDET_VERSION}, the version that installs beside mmcv '
        '2.1.0 and mmseg 1.2.2).')


def require_mmdet(owner: str) -> None:
    """Raise an ``ImportError`` naming the extra when mmdet is missing."""
    if not MMDET_AVAILABLE:
        raise ImportError(mmdet_hint(owner))


class MMDetRequired(BaseModule):
    """Stands in for an mmseg head whose mmdet base is missing: building it
    raises :func:`mmdet_hint`."""

    def __init__(self, *args, **kwargs) -> None:
        raise ImportError(mmdet_hint(type(self).__name__))


def register_mmdet_placeholders() -> Dict[str, type]:
    """Replace mmseg's fallback MaskFormer / Mask2Former heads in ``MODELS``
    by :class:`MMDetRequired` placeholders (nothing with mmdet installed).

    Returns:
        dict: The names registered and their placeholders.
    """
    placeholders = {}
    for head in (MaskFormerHead, Mask2FormerHead):
        name = head.__name__
        if head.__bases__ != (
                BaseModule, ) or MODELS.module_dict.get(name) is not head:
            continue
        placeholder = type(
            name, (MMDetRequired, ), {
                '__module__': __name__,
                '__doc__':
                f'mmseg\'s ``{name}`` without mmdet: raises the hint.'
            })
        MODELS.register_module(name=name, module=placeholder, force=True)
        placeholders[name] = placeholder
    return placeholders
