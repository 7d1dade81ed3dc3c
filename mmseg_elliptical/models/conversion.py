"""Convert mmseg / mmcv modules in place into their elliptical versions.

The class of a module is swapped for the subclass registered for its exact
type (a subclass may add behaviour the plugin does not know), so parameters,
buffers, hooks and the state dict stay mmseg's.
"""
from typing import Callable, Dict, Optional

import torch.nn as nn

from ..errors import ConversionError  # noqa: F401

ELLIPTICAL_VERSIONS: Dict[type, type] = {}


def register_elliptical_version(source: type) -> Callable[[type], type]:
    """Class decorator: register ``cls`` as the elliptical ``source``."""

    def register(cls: type) -> type:
        if not issubclass(cls, source):
            raise TypeError(f'{cls.__name__} must subclass {source.__name__}.')
        ELLIPTICAL_VERSIONS[source] = cls
        return cls

    return register


def elliptical_version(cls: type, kind: type = object) -> Optional[type]:
    """The elliptical class of ``cls`` (``cls`` itself when it is one), if
    it subclasses ``kind``; else None."""
    found = cls if cls in ELLIPTICAL_VERSIONS.values() else \
        ELLIPTICAL_VERSIONS.get(cls)
    return found if isinstance(found, type) and issubclass(found,
                                                           kind) else None


def qualname(cls: type) -> str:
    """``module.QualName`` of a class, for messages."""
    return f'{cls.__module__}.{cls.__qualname__}'


def to_elliptical(module: nn.Module, **options) -> nn.Module:
    """Convert ``module`` in place into the elliptical version of its type.

    Args:
        module (nn.Module): An mmseg / mmcv backbone, head, layer or
            attention.
        **options: Arguments of the elliptical class's ``init_elliptical``.

    Returns:
        nn.Module: ``module`` itself.

    Raises:
        ConversionError: If the exact type has no elliptical version or its
            settings are not supported; the module is left as it was.
    """
    cls = ELLIPTICAL_VERSIONS.get(type(module))
    if cls is None:
        if type(module) in ELLIPTICAL_VERSIONS.values():
            raise ConversionError(
                f'{qualname(type(module))} is elliptical already; set its '
                'options on the config instead of converting it again.')
        supported = ', '.join(sorted(c.__name__ for c in ELLIPTICAL_VERSIONS))
        raise ConversionError(
            f'{qualname(type(module))} has no elliptical version (the type '
            f'must match exactly; supported: {supported}).')
    check = getattr(cls, 'check_convertible', None)
    if check is not None:
        check(module)
    if options and not hasattr(cls, 'init_elliptical'):
        raise ConversionError(
            f'{cls.__name__} takes no options, got {options}.')
    source = type(module)
    module.__class__ = cls
    if hasattr(cls, 'init_elliptical'):
        try:
            module.init_elliptical(**options)
        except BaseException:  # bad options: the module stays as it was
            module.__class__ = source
            raise
    return module
