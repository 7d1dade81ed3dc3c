"""A config's model and hook types checked against mmseg's registries
before anything is built: a type no registry holds, or a hook argument its
class does not take, is one line with the closest names (a hook's
``TypeError`` would come only once the runner is built)."""
import inspect
from typing import Iterator, Optional

from mmengine.config import Config
from mmseg.registry import HOOKS, MODELS

from ..errors import ConfigError
from .hooks import config_hooks
from .keywords import init_keywords, unknown_keyword_error
from .unknown_types import unknown_type_error

__all__ = [
    'MODEL_PARTS', 'LAYER_CFGS', 'model_class', 'layer_types',
    'check_model_types', 'check_hook_args'
]

#: The parts of an mmseg segmentor config built from ``MODELS``.
MODEL_PARTS = ('backbone', 'neck', 'decode_head', 'auxiliary_head')
#: Layer configs mmcv's builders look up in ``MODELS``; their ``KeyError``
#: does not name the type ("Cannot find None in registry ...").
LAYER_CFGS = ('norm_cfg', 'act_cfg', 'conv_cfg')


def model_class(kind) -> Optional[type]:
    """The class a model config's ``type`` names in mmseg's ``MODELS`` (a
    class given as the type is itself), or None."""
    return kind if isinstance(kind, type) else MODELS.get(kind)


def layer_types(cfg) -> Iterator[str]:
    """The ``type`` of every :data:`LAYER_CFGS` dict in a (nested) config."""
    items = cfg.items() if isinstance(cfg, dict) else enumerate(cfg) \
        if isinstance(cfg, (list, tuple)) else ()
    for key, value in items:
        if key in LAYER_CFGS and isinstance(value, dict) and isinstance(
                value.get('type'), str):
            yield value['type']
        else:
            yield from layer_types(value)


def check_model_types(cfg: Config) -> None:
    """Check, without building it, that mmseg's ``MODELS`` registry (with
    its parents) holds the types of the config's model, of its backbone,
    neck and heads, and of every norm, activation and convolution layer;
    then the hooks the runner builds from it (:func:`check_hook_args`).

    Raises:
        ConfigError: One of them is not registered, or a hook's arguments
            are wrong.
    """
    model = cfg.get('model')
    if not isinstance(model, dict):
        return
    parts = [model] + [model.get(p) for p in MODEL_PARTS]
    parts = [c for p in parts for c in (p if isinstance(p, list) else [p])]
    kinds = [p.get('type') for p in parts if isinstance(p, dict)]
    for kind in kinds + list(layer_types(model)):
        if isinstance(kind, str) and MODELS.get(kind) is None:
            raise unknown_type_error(kind, MODELS.scope, MODELS.name)
    check_hook_args(cfg)


def check_hook_args(cfg: Config) -> None:
    """Check the hooks of a config (:func:`.hooks.config_hooks`) before the
    runner builds them: each type registered in mmseg's ``HOOKS`` (with its
    parents), no keyword its class does not take, none it needs missing;
    the plugin's own hooks are built, so that they check their values.

    Raises:
        ConfigError: With where the hook is set and, for a misspelt
            keyword, the closest one.
    """
    for where, hook in config_hooks(cfg):
        kind = hook.get('type')
        cls = kind if isinstance(kind, type) else HOOKS.get(kind) \
            if isinstance(kind, str) else None
        if isinstance(kind, str) and cls is None:
            error = unknown_type_error(kind, HOOKS.scope, HOOKS.name)
            raise ConfigError(f'{where}: {error}')
        if cls is None:
            continue
        kwargs = {
            k: v
            for k, v in hook.items()
            if k not in ('type', 'priority', '_scope_')  # as Registry.build
        }
        names, closed = init_keywords(cls)
        unknown = [k for k in kwargs if k not in names] if closed else []
        if unknown:
            error = unknown_keyword_error(cls.__name__, unknown[0], names)
            raise ConfigError(f'{where}: {error}')
        params = inspect.signature(cls).parameters.values()
        missing = [
            p.name for p in params if p.default is p.empty and p.kind in
            (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in kwargs
        ]
        if missing:
            raise ConfigError(f'{where}: {cls.__name__} needs {missing[0]}= '
                              '(missing from the config).')
        if cls.__module__.startswith('mmseg_elliptical.'):
            try:
                cls(**kwargs)
            except ConfigError as error:
                raise ConfigError(f'{where}: {error}') from None
