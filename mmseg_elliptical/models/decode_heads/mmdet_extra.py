"""mmdet, the optional extra of the MaskFormer and Mask2Former heads.

mmseg's ``MaskFormerHead`` and ``Mask2FormerHead`` subclass mmdet's heads.
Without mmdet, mmseg bases them on mmengine's ``BaseModule`` instead, silently
(mmseg issue #2914), and building one fails deep inside with ``unexpected
keyword argument 'in_channels'``. :func:`register_mmdet_placeholders` (called
once when the plugin is imported) replaces exactly those two fallback classes
in mmseg's ``MODELS`` registry by placeholders whose construction raises an
``ImportError`` saying what to install; with mmdet installed it changes
nothing. The plugin's own heads check for mmdet before building
(:func:`require_mmdet`).
"""
from typing import Dict

from mmengine.model import BaseModule
from mmseg.models.decode_heads import Mask2FormerHead, MaskFormerHead
from mmseg.registry import MODELS

# mmdet 3.3.0 asserts 2.0.0rc4 <= mmcv < 2.2.0, so it installs beside mmcv
# 2.1.0, mmengine 0.10.7 and mmseg 1.2.2 (setup.py's extra pins it).
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
    """Raise an ``ImportError`` naming the extra when mmdet is missing.

    Args:
        owner (str): The class that needs mmdet, for the message.
    """
    if not MMDET_AVAILABLE:
        raise ImportError(mmdet_hint(owner))


class MMDetRequired(BaseModule):
    """Stands in for an mmseg head whose mmdet base is missing: building it
    raises the :func:`mmdet_hint` of its name instead of a ``TypeError``
    from ``BaseModule``."""

    def __init__(self, *args, **kwargs) -> None:
        raise ImportError(mmdet_hint(type(self).__name__))


def register_mmdet_placeholders() -> Dict[str, type]:
    """Replace mmseg's fallback MaskFormer / Mask2Former heads in ``MODELS``.

    Only the classes mmseg based on ``BaseModule`` (mmdet missing) are
    replaced, by subclasses of :class:`MMDetRequired` of the same names;
    with mmdet installed nothing changes.

    Returns:
        dict: The names registered, and their placeholders (empty when
        mmdet is installed).
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
