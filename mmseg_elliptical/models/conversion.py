"""Convert mmseg / mmcv modules in place into their elliptical versions.

A module is converted by swapping its class for the elliptical subclass
registered for its *exact* type (:func:`elliptical_version_of`): parameters,
buffers, hooks and the RNG state are untouched, so the state dict and the
initial weights stay mmseg's. A type without an elliptical version, a
subclass included (it may add behaviour this package does not know), is an
error that names it.
"""
from typing import Callable, Dict

import torch.nn as nn

ELLIPTICAL_VERSIONS: Dict[type, type] = {}


def elliptical_version_of(source: type) -> Callable[[type], type]:
    """Class decorator: register ``cls`` as the elliptical ``source``.

    Args:
        source (type): The mmseg / mmcv class ``cls`` subclasses.

    Returns:
        callable: The decorator.
    """

    def register(cls: type) -> type:
        if not issubclass(cls, source):
            raise TypeError(f'{cls.__name__} must subclass {source.__name__}.')
        ELLIPTICAL_VERSIONS[source] = cls
        return cls

    return register


def qualname(cls: type) -> str:
    return f'{cls.__module__}.{cls.__qualname__}'


def to_elliptical(module: nn.Module, **options) -> nn.Module:
    """Convert ``module`` in place into the elliptical version of its type.

    Args:
        module (nn.Module): An mmseg / mmcv layer or attention whose exact type
            has a registered elliptical version.
        **options: ``init_elliptical`` options of an attention
            (``elliptical``, ``reduction``, ``eps``).

    Returns:
        nn.Module: ``module`` itself, now of the elliptical class.

    Raises:
        TypeError: If the type (exactly; subclasses add behaviour this
            package does not know) has no elliptical version.
    """
    cls = ELLIPTICAL_VERSIONS.get(type(module))
    if cls is None:
        supported = ', '.join(sorted(c.__name__ for c in ELLIPTICAL_VERSIONS))
        raise TypeError(
            f'{qualname(type(module))} has no elliptical version (the type '
            f'must match exactly; supported: {supported}).')
    check = getattr(cls, 'check_convertible', None)
    if check is not None:
        check(module)
    module.__class__ = cls
    if hasattr(cls, 'init_elliptical'):
        module.init_elliptical(**options)
    elif options:
        raise TypeError(f'{cls.__name__} takes no options, got {options}.')
    return module
