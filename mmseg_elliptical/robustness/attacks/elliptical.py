"""Which models of a grid have elliptical layers (read from their configs,
nothing built): those get adaptive attack cells, through ``m``."""
from typing import Dict, Optional, Sequence

from ...models.transformer import EllipticalTransformerMixin
from ...utils.config import ModelSpec, load_config
from ...utils.registry import model_class


def has_elliptical_layers(model_cfg: Dict) -> bool:
    """Whether a model config holds a part of the plugin's elliptical
    classes with elliptical layers (read from the config, nothing built)."""
    if isinstance(model_cfg, (list, tuple)):
        return any(has_elliptical_layers(c) for c in model_cfg)
    if not isinstance(model_cfg, dict):
        return False
    kind = model_cfg.get('type')
    cls = model_class(kind) if isinstance(kind, str) else None
    if isinstance(cls, type) and issubclass(
            cls, EllipticalTransformerMixin) and model_cfg.get(
                'elliptical_layers', None) != []:
        return True
    return any(has_elliptical_layers(v) for v in model_cfg.values())


def elliptical_models(specs: Sequence[ModelSpec],
                      cfg_options: Optional[Dict] = None) -> Dict[str, bool]:
    """``{name: whether its config has elliptical layers}`` of each model
    (:func:`has_elliptical_layers`)."""
    return {
        spec.name:
        has_elliptical_layers(load_config(spec.config, cfg_options).model)
        for spec in specs
    }
