"""``configs/_base_/noise_training.py``: Gaussian noise augmentation at
sigma on the 0-1 scale, composing as the adversarial recipe does (beside
any config's hooks, and with adversarial training); the hook's draws
against certify.py's, per image and iteration; bad recipes refused."""
import os.path as osp

import pytest
import torch
from builders import DEMO_ELLIPTICAL, ROOT, tiny_config
from mmengine.config import Config
from mmengine.structures import BaseDataElement
from mmseg.registry import RUNNERS

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.engine.hooks import (AdversarialTrainingHook,
                                           NoiseTrainingHook, SegSummaryHook)
from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.utils.hooks import with_recipe_hook

pytestmark = pytest.mark.usefixtures('single_thread')

BASES = osp.join(ROOT, 'configs', '_base_')


def composed(demo_root, tmp_path, bases, extra=''):
    tiny = tiny_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path / 'wd'),
                       **{'train_cfg.max_iters': 2})
    tiny.dump(str(tmp_path / 'tiny.py'))
    path = tmp_path / 'composed.py'
    names = ', '.join(f"'{osp.join(BASES, b)}'" for b in bases)
    path.write_text(f"_base_ = ['{tmp_path / 'tiny.py'}', {names}]\n" + extra)
    return Config.fromfile(str(path))


def test_the_base_trains_beside_the_config_hooks(demo_root, tmp_path):
    cfg = composed(demo_root, tmp_path, ['noise_training.py'])
    assert with_recipe_hook(cfg).custom_hooks[-1] == dict(
        type='NoiseTrainingHook', sigma=0.25, ratio=1.)
    runner = RUNNERS.build(cfg)
    kinds = [type(h) for h in runner.hooks]
    assert SegSummaryHook in kinds and NoiseTrainingHook in kinds
    seen = []
    hook = next(h for h in runner.hooks if isinstance(h, NoiseTrainingHook))
    original = hook.before_train_iter

    def spy(runner, batch_idx, data_batch=None):
        before = [x.clone() for x in data_batch['inputs']]
        original(runner, batch_idx, data_batch)
        seen.append((before, [x.clone() for x in data_batch['inputs']]))

    hook.before_train_iter = spy
    runner.train()
    assert len(seen) == 2
    noise = torch.cat([(a - b.float()).flatten() for b, x in seen
                       for a, b in zip(x, b)])
    assert noise.std().item() / 255 == pytest.approx(0.25, rel=0.05)


def test_with_adversarial_training_noise_then_attack(demo_root, tmp_path):
    cfg = composed(demo_root, tmp_path, ['adversarial_training_cheap.py'],
                   'noise_training = dict(sigma=0.5)\n')
    cfg = with_recipe_hook(cfg)
    assert [h['type'] for h in cfg.custom_hooks] == [
        'SegSummaryHook', 'AdversarialTrainingHook', 'NoiseTrainingHook'
    ]
    runner = RUNNERS.build(cfg)
    order = [type(h) for h in runner.hooks]
    assert order.index(NoiseTrainingHook) < order.index(
        AdversarialTrainingHook)  # the attack starts from the noisy image


class FakeRunner:
    iter = 7


def batch(paths, size=8):
    gen = torch.Generator().manual_seed(0)
    return dict(
        inputs=[
            torch.randint(
                0, 256, (3, size, size), generator=gen, dtype=torch.uint8)
            for _ in paths
        ],
        data_samples=[
            BaseDataElement(metainfo=dict(img_path=p)) for p in paths
        ])


def test_draws_per_image_and_iteration_as_certify_draws():
    from mmseg_elliptical.robustness.certification import smoothing
    hook = NoiseTrainingHook(sigma=0.5, seed=3)
    hook.data_root = '/data'
    data = batch(['/data/a.png', '/data/b.png'])
    clean = [x.clone() for x in data['inputs']]
    hook.before_train_iter(FakeRunner(), 0, data)
    for x, c, key in zip(data['inputs'], clean, ('a.png', 'b.png')):
        want = c.float() + torch.randn(
            c.shape, generator=smoothing.draw_generator(f'{key}@7',
                                                        3)) * (0.5 * 255)
        torch.testing.assert_close(x, want)
    assert not torch.allclose(data['inputs'][0] - clean[0],
                              data['inputs'][1] - clean[1])
    alone = batch(['/data/a.png'])
    hook.before_train_iter(FakeRunner(), 3, alone)
    torch.testing.assert_close(alone['inputs'][0], data['inputs'][0])
    later = batch(['/data/a.png'])
    runner = FakeRunner()
    runner.iter = 8
    hook.before_train_iter(runner, 0, later)
    assert not torch.allclose(later['inputs'][0], data['inputs'][0])


def test_ratio_noises_a_share_of_the_images():
    paths = [f'/data/{i}.png' for i in range(200)]
    data = batch(paths, size=2)
    clean = [x.clone() for x in data['inputs']]
    hook = NoiseTrainingHook(sigma=0.25, ratio=0.3)
    hook.data_root = '/data'
    hook.before_train_iter(FakeRunner(), 0, data)
    noised = sum(not torch.equal(x, c.float())
                 for x, c in zip(data['inputs'], clean))
    assert 40 <= noised <= 80
    none = batch(paths[:3])
    NoiseTrainingHook(
        sigma=0.25, ratio=0.).before_train_iter(FakeRunner(), 0, none)
    assert all(x.dtype == torch.uint8 for x in none['inputs'])


@pytest.mark.parametrize('args, words', [
    (dict(sigma=0), 'sigma=0 adds no noise'),
    (dict(sigma=64), 'sigma=64 must be a number in [0, 10] on the 0-1 scale'),
    (dict(sigma=0.25, ratio=2), 'ratio=2 must be a number in [0, 1]'),
    (dict(sigma='0.25'), "sigma='0.25' must be a number"),
    (dict(sigma=0.25, seed=1.5), 'seed=1.5 must be an integer'),
])
def test_bad_arguments_are_one_line(args, words):
    with pytest.raises(ConfigError, match=r'^NoiseTrainingHook: ') as err:
        NoiseTrainingHook(**args)
    assert words in str(err.value)


def test_the_recipe_and_its_hook_twice_are_refused(demo_root, tmp_path):
    cfg = composed(
        demo_root, tmp_path, ['noise_training.py'],
        "custom_hooks = [dict(type='NoiseTrainingHook', "
        'sigma=0.5)]\n')
    with pytest.raises(
            ConfigError,
            match='both noise_training and an '
            'NoiseTrainingHook in custom_hooks: keep one'):
        with_recipe_hook(cfg)
