"""Convert mmseg / mmcv modules in place into their elliptical versions.

A module is converted by swapping its class for the elliptical subclass
registered for its *exact* type (:func:`register_elliptical_version`, in
:data:`ELLIPTICAL_VERSIONS`): parameters, buffers, hooks and the RNG state
are untouched, so the state dict and the initial weights stay mmseg's. A
module that cannot be converted (a type without an elliptical version, a
subclass included, since it may add behaviour this package does not know, or
a configuration the elliptical class does not run) is a
:class:`ConversionError` that names it.

The one verb is :func:`to_elliptical`; :func:`elliptical_version` looks the
class up without converting anything.
"""
from typing import Callable, Dict, Optional

import torch.nn as nn

from ..errors import ConversionError  # noqa: F401

ELLIPTICAL_VERSIONS: Dict[type, type] = {}


def register_elliptical_version(source: type) -> Callable[[type], type]:
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


def elliptical_version(cls: type, kind: type = object) -> Optional[type]:
    """The elliptical class of ``cls``: its registered version, ``cls``
    itself when it is one, else None.

    Args:
        cls (type): An mmseg / mmcv class, or an elliptical one.
        kind (type): Only a version that subclasses ``kind`` counts (e.g.
            ``EllipticalTransformerMixin``: a backbone or head, not a layer
            or an attention). Defaults to ``object`` (any).

    Returns:
        type, optional: The elliptical class.
    """
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
            run (its ``check_convertible`` says which). The module is then
            left as it was, as it is when ``options`` are rejected.
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
