"""The hooks a config asks for: ``custom_hooks``, and the adversarial
training recipe that ``configs/_base_/adversarial_training.py`` keeps in a
key of its own, so that it composes with any config's ``custom_hooks``."""
import copy
from typing import List, Tuple

from ..errors import ConfigError

#: The config key of the adversarial-training recipe: the arguments of
#: ``AdversarialTrainingHook`` (attack, ratio, adaptive, seed, ...).
RECIPE_KEY = 'adversarial_training'
#: The hook the recipe becomes.
RECIPE_HOOK = 'AdversarialTrainingHook'
#: The runner that turns the recipe into its hook when it is built (the
#: ``runner_type`` mmseg's tools/train.py and test.py build).
RECIPE_RUNNER = 'AdversarialTrainingRunner'


def _hook_type(hook) -> str:
    kind = hook.get('type') if isinstance(hook, dict) else None
    return getattr(kind, '__name__', str(kind)).split('.')[-1]


def recipe_hook(cfg) -> dict:
    """The hook config of ``cfg``'s :data:`RECIPE_KEY` (a copy).

    Raises:
        ConfigError: The recipe is not a dict of the hook's arguments, the
            config's runner would not read it, or ``custom_hooks`` holds an
            ``AdversarialTrainingHook`` too.
    """
    recipe = cfg.get(RECIPE_KEY)
    if not isinstance(recipe, dict) or 'type' in recipe:
        raise ConfigError(
            f'{RECIPE_KEY} must be a dict of {RECIPE_HOOK}\'s arguments '
            f'(attack=..., ratio=...), without type; got {recipe!r}.')
    if cfg.get('runner_type') != RECIPE_RUNNER:
        raise ConfigError(
            f'{RECIPE_KEY} is read by runner_type=\'{RECIPE_RUNNER}\' only, '
            f'and the config sets runner_type={cfg.get("runner_type")!r}: '
            f'inherit configs/_base_/adversarial_training.py (which sets '
            f'both), or add dict(type=\'{RECIPE_HOOK}\', ...) to '
            f'custom_hooks instead of {RECIPE_KEY}.')
    if any(
            _hook_type(h) == RECIPE_HOOK
            for h in cfg.get('custom_hooks') or []):
        raise ConfigError(
            f'the config has both {RECIPE_KEY} and an {RECIPE_HOOK} in '
            f'custom_hooks: keep one (the base adversarial_training.py sets '
            f'{RECIPE_KEY}; change its fields there, e.g. '
            f'{RECIPE_KEY}=dict(ratio=0.5)).')
    return dict(type=RECIPE_HOOK, **copy.deepcopy(dict(recipe)))


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
    if cfg.get(RECIPE_KEY) is not None:
        hooks.append((RECIPE_KEY, recipe_hook(cfg)))
    return [(where, h) for where, h in hooks if isinstance(h, dict)]


def with_recipe_hook(cfg):
    """``cfg`` (a copy) with its recipe moved into ``custom_hooks``: the
    hook last, the :data:`RECIPE_KEY` removed (the copy the runner dumps
    then trains as it is). ``cfg`` itself when it has no recipe.

    Raises:
        ConfigError: :func:`recipe_hook`'s.
    """
    if cfg.get(RECIPE_KEY) is None:
        return cfg
    hook = recipe_hook(cfg)
    cfg = copy.deepcopy(cfg)
    cfg.pop(RECIPE_KEY)
    cfg['custom_hooks'] = list(cfg.get('custom_hooks') or []) + [hook]
    return cfg
