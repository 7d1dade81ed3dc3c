"""A config ``type`` that no registry holds, as one line with the closest
names (mmengine raises a ``KeyError`` deep inside the nested builds,
without a hint); light, as the tools' checks (:func:`.arguments.tool_main`).
"""
import difflib
import importlib
import re
from contextlib import contextmanager
from typing import Iterator, List, Optional

from mmengine.registry import Registry

from ..errors import ConfigError

NOT_REGISTERED = re.compile(r'(\w+) is not in the (\w+)::(\w+) registry')


def registry_named(scope: str, name: str) -> Optional[Registry]:
    """The registry ``scope::name`` of mmengine or an OpenMMLab package."""
    try:
        module = importlib.import_module(f'{scope}.registry')
    except ImportError:
        return None
    for value in vars(module).values():
        if isinstance(value, Registry) and value.name == name \
                and value.scope == scope:
            return value
    return None


def registered_names(registry: Registry) -> List[str]:
    """Every name a build through ``registry`` finds: its own and its
    parents'."""
    registry.import_from_location()
    names = set()
    while registry is not None:
        names.update(registry.module_dict)
        registry = registry.parent
    return sorted(names)


def unknown_type_error(kind: str, scope: str, name: str) -> ConfigError:
    """The error for ``type=kind`` missing from the registry
    ``scope::name``."""
    registry = registry_named(scope, name)
    names = registered_names(registry) if registry is not None else []
    close = difflib.get_close_matches(kind, names, n=3, cutoff=0.6)
    hint = ('closest registered: ' +
            ', '.join(close) if close else 'no registered name is close')
    return ConfigError(
        f"type='{kind}' is not in the {scope}::{name} registry ({hint}). "
        'Correct the type in the config, or add the module that registers it '
        'to custom_imports.')


def registry_error(error: BaseException) -> Optional[ConfigError]:
    """:func:`unknown_type_error` for mmengine's ``KeyError`` of an unknown
    type; None for any other error."""
    match = NOT_REGISTERED.search(str(error)) if isinstance(error,
                                                            KeyError) else None
    return unknown_type_error(*match.groups()) if match else None


@contextmanager
def unknown_types_as_config_errors() -> Iterator[None]:
    """Raise :func:`registry_error`'s one-line :class:`ConfigError` for
    mmengine's ``KeyError`` of an unknown type in the block; any other error
    passes unchanged."""
    try:
        yield
    except KeyError as error:
        config_error = registry_error(error)
        if config_error is None:
            raise
        raise config_error from None
