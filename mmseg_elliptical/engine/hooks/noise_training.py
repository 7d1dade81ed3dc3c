"""Gaussian noise augmentation from any config (the training of the base
models that randomised smoothing certifies: Cohen et al., ICML 2019;
Fischer et al., ICML 2021): each training batch gets noise before the
step, as ``tools/analysis_tools/certify.py`` draws it."""
from typing import Optional

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmseg.registry import HOOKS
from torch import Tensor

from ...errors import ConfigError
from ...robustness.attacks.keys import image_key
from ...robustness.attacks.training import check_model, draw
from ...robustness.certification.smoothing import draw_generator, noisy_copies


def _fail(problem: str) -> None:
    raise ConfigError(f'NoiseTrainingHook: {problem}.')


@HOOKS.register_module()
class NoiseTrainingHook(Hook):
    """Train on noisy images: before each training iteration the images of
    the batch (all, or a fraction ``ratio`` drawn per image) get Gaussian
    noise of standard deviation ``sigma`` on the 0-1 scale (``sigma * 255``
    levels, not clipped), added to the 0-255 images before the data
    preprocessor normalises them. Each image's draw is seeded by (its path
    relative to the training data's root, iteration, ``seed``): a new draw
    every iteration, two processes draw as one, a resumed run continues
    exactly. It runs before an :class:`AdversarialTrainingHook` (which then
    attacks the noisy images) when both recipes are inherited.

    Args:
        sigma (float): Noise level on the 0-1 scale, > 0 (certify.py's
            ``--sigmas``).
        ratio (float): Fraction of the images noised, in [0, 1]. Defaults
            to 1 (the whole batch).
        seed (int): Seed of the draws. Defaults to 0.
    """
    priority = 'BELOW_NORMAL'  # before AdversarialTrainingHook ('LOW')

    def __init__(self, sigma: float, ratio: float = 1., seed: int = 0) -> None:
        for name, value, low, high in (('sigma', sigma, 0, 10), ('ratio',
                                                                 ratio, 0, 1)):
            if isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not low <= value <= high:
                _fail(f'{name}={value!r} must be a number in [{low}, {high}]' +
                      (' on the 0-1 scale (0.25 is 64 levels)' if name ==
                       'sigma' else ''))
        if sigma == 0:
            _fail('sigma=0 adds no noise: give sigma > 0, or drop the '
                  'recipe for plain training')
        if isinstance(seed, bool) or not isinstance(seed, int):
            _fail(f'seed={seed!r} must be an integer')
        self.sigma, self.ratio, self.seed = float(sigma), float(ratio), seed
        self.data_root: Optional[str] = None

    def before_train(self, runner) -> None:
        """Refuse a model whose preprocessor does not take 0-255 images."""
        model = runner.model
        check_model(model.module if is_model_wrapper(model) else model)
        dataset = getattr(
            getattr(runner, 'train_dataloader', None), 'dataset', None)
        self.data_root = getattr(dataset, 'data_root', None)

    def before_train_iter(self,
                          runner,
                          batch_idx: int,
                          data_batch: Optional[dict] = None) -> None:
        """Add the noise to the chosen images of ``data_batch`` (in
        place)."""
        if data_batch is None or self.ratio == 0:
            return
        inputs = data_batch['inputs']
        if isinstance(inputs, Tensor):  # a stacked batch: a float copy
            inputs = data_batch['inputs'] = inputs.float()
        for i, sample in enumerate(data_batch['data_samples']):
            key = image_key(
                str(sample.metainfo.get('img_path', f'{batch_idx}/{i}')),
                self.data_root)
            if self.ratio < 1 and draw(f'choice/{key}@{runner.iter}',
                                       self.seed) >= self.ratio:
                continue
            with torch.no_grad():
                inputs[i] = noisy_copies(
                    inputs[i], self.sigma, 1,
                    draw_generator(f'{key}@{runner.iter}', self.seed))[0]
