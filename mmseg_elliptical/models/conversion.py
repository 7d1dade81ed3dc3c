"""Convert mmseg / mmcv modules in place into their elliptical versions.

A module is converted by swapping its class for the elliptical subclass
registered for its *exact* type (:func:`elliptical_version_of`): parameters,
buffers, hooks and the RNG state are untouched, so the state dict and the
initial weights stay mmseg's. A module that cannot be converted (a type
without an elliptical version, a subclass included, since it may add
behaviour this package does not know, or a configuration the elliptical
class does not run) is a :class:`ConversionError` that names it.

The one verb is :func:`to_elliptical`; :func:`elliptical_version` looks the
class up without converting anything.
"""
from typing import Callable, Dict, Optional

import torch.nn as nn

ELLIPTICAL_VERSIONS: Dict[type, type] = {}


class ConversionError(TypeError):
    """A module has no elliptical version, or one that runs its settings."""


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


def elliptical_version(cls: type) -> Optional[type]:
    """The elliptical class of ``cls``: its registered version, ``cls``
    itself when it is one, else None."""
    if cls in ELLIPTICAL_VERSIONS.values():
        return cls
    return ELLIPTICAL_VERSIONS.get(cls)


def qualname(cls: type) -> str:
    """``module.QualName`` of a class, for messages."""
    return f'{cls.__module__}.{cls.__qualname__}'


def to_elliptical(module: nn.Module, **options) -> nn.Module:
    """Convert ``module`` in place into the elliptical version of its type.

    Args:
        module (nn.Module): An mmseg / mmcv backbone, head, layer or attention
            whose exact type has a registered elliptical version.
        **options: The elliptical class's own arguments, passed to its
            ``init_elliptical`` (e.g. ``elliptical_layers`` of a backbone;
            ``elliptical``, ``relevance_reduction``, ``relevance_eps`` of an
            attention).

    Returns:
        nn.Module: ``module`` itself, now of the elliptical class.

    Raises:
        ConversionError: If the type (exactly) has no elliptical version, or
            the module's configuration is one the elliptical class does not
            run (its ``check_convertible`` says which).
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
    module.__class__ = cls
    if hasattr(cls, 'init_elliptical'):
        module.init_elliptical(**options)
    elif options:
        raise ConversionError(
            f'{cls.__name__} takes no options, got {options}.')
    return module
