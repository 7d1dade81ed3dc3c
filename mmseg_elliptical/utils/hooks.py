"""The hooks a config asks for: ``custom_hooks``, and the training
recipes that ``configs/_base_/adversarial_training.py`` and
``noise_training.py`` keep in keys of their own, so that they compose with
any config's ``custom_hooks`` and with each other."""
import copy
from typing import Dict, List, Tuple

from ..errors import ConfigError

#: The config key of the adversarial-training recipe: the arguments of
#: ``AdversarialTrainingHook`` (attack, ratio, adaptive, seed, ...).
RECIPE_KEY = 'adversarial_training'
#: The hook the recipe becomes.
RECIPE_HOOK = 'AdversarialTrainingHook'
#: The runner that turns the recipe into its hook when it is built (the
#: ``runner_type`` mmseg's tools/train.py and test.py build).
RECIPE_RUNNER = 'AdversarialTrainingRunner'
#: The config key of the noise-augmentation recipe (``NoiseTrainingHook``'s
#: arguments: sigma, ratio, seed).
NOISE_KEY = 'noise_training'
#: Every recipe key and the hook it becomes, in the order they are appended.
RECIPES: Dict[str, str] = {
    RECIPE_KEY: RECIPE_HOOK,
    NOISE_KEY: 'NoiseTrainingHook'
}


def _hook_type(hook) -> str:
    kind = hook.get('type') if isinstance(hook, dict) else None
    return getattr(kind, '__name__', str(kind)).split('.')[-1]


def recipe_hook(cfg, key: str = RECIPE_KEY) -> dict:
    """The hook config of ``cfg``'s recipe ``key`` (a copy; default the
    adversarial one, :data:`RECIPE_KEY`).

    Raises:
        ConfigError: The recipe is not a dict of the hook's arguments, the
            config's runner would not read it, or ``custom_hooks`` holds its
            hook too.
    """
    recipe, hook = cfg.get(key), RECIPES[key]
    if not isinstance(recipe, dict) or 'type' in recipe:
        raise ConfigError(
            f'{key} must be a dict of {hook}\'s arguments '
            f'({"attack=..., ratio=..." if key == RECIPE_KEY else "sigma=..."}'
            f'), without type; got {recipe!r}.')
    if cfg.get('runner_type') != RECIPE_RUNNER:
        raise ConfigError(
            f'{key} is read by runner_type=\'{RECIPE_RUNNER}\' only, '
            f'and the config sets runner_type={cfg.get("runner_type")!r}: '
            f'inherit configs/_base_/{key}.py (which sets '
            f'both), or add dict(type=\'{hook}\', ...) to '
            f'custom_hooks instead of {key}.')
    if any(_hook_type(h) == hook for h in cfg.get('custom_hooks') or []):
        example = 'ratio=0.5' if key == RECIPE_KEY else 'sigma=0.5'
        raise ConfigError(f'the config has both {key} and an {hook} in '
                          f'custom_hooks: keep one (the base {key}.py sets '
                          f'{key}; change its fields there, e.g. '
                          f'{key}=dict({example})).')
    return dict(type=hook, **copy.deepcopy(dict(recipe)))


def config_hooks(cfg) -> List[Tuple[str, dict]]:
    """Every hook config of ``cfg`` with where it is set: its
    ``default_hooks``, its ``custom_hooks`` and the recipe's hook.

    Returns:
        list[tuple[str, dict]]: ``(where, hook config)``, ``where`` e.g.
        ``'custom_hooks[1]'`` or ``'adversarial_training'``.

    Raises:
        ConfigError: :func:`recipe_hook`'s.
    """
    hooks = [(f'default_hooks.{k}', h)
             for k, h in (cfg.get('default_hooks') or {}).items()]
    hooks += [(f'custom_hooks[{i}]', h)
              for i, h in enumerate(cfg.get('custom_hooks') or [])]
    hooks += [(key, recipe_hook(cfg, key)) for key in RECIPES
              if cfg.get(key) is not None]
    return [(where, h) for where, h in hooks if isinstance(h, dict)]


def with_recipe_hook(cfg):
    """``cfg`` (a copy) with its recipes (:data:`RECIPES`) moved into
    ``custom_hooks``: their hooks last, the keys removed (the copy the
    runner dumps then trains as it is). ``cfg`` itself when it has none.

    Raises:
        ConfigError: :func:`recipe_hook`'s.
    """
    keys = [key for key in RECIPES if cfg.get(key) is not None]
    if not keys:
        return cfg
    hooks = [recipe_hook(cfg, key) for key in keys]
    cfg = copy.deepcopy(cfg)
    for key in keys:
        cfg.pop(key)
    cfg['custom_hooks'] = list(cfg.get('custom_hooks') or []) + hooks
    return cfg
