"""The runner that turns a config's adversarial-training recipe into its
hook, so that ``configs/_base_/adversarial_training.py`` composes with any
config, ``custom_hooks`` and all (docs/evidence.md)."""
from mmengine.runner import Runner
from mmseg.registry import RUNNERS

from ..utils.hooks import RECIPE_RUNNER, with_recipe_hook


@RUNNERS.register_module(name=RECIPE_RUNNER)
class AdversarialTrainingRunner(Runner):
    """mmengine's :class:`Runner`, built with the config's
    ``adversarial_training`` recipe (the arguments of
    :class:`.hooks.AdversarialTrainingHook`) appended to its
    ``custom_hooks`` as that hook.

    mmseg's tools/train.py and test.py build it when the config sets
    ``runner_type='AdversarialTrainingRunner'``, as the base does. The
    config the runner dumps into its work dir has the hook in
    ``custom_hooks`` and no recipe key, so it trains as it is.
    """

    @classmethod
    def from_cfg(cls, cfg) -> Runner:
        """Build the runner from ``cfg`` with the recipe's hook.

        Raises:
            ConfigError: The recipe cannot be read
                (:func:`..utils.hooks.recipe_hook`).
        """
        return super().from_cfg(with_recipe_hook(cfg))
