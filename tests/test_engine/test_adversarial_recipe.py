"""``configs/_base_/adversarial_training.py`` composes with any config: its
recipe is a key of its own that :class:`AdversarialTrainingRunner` turns
into the hook beside the config's own ``custom_hooks`` (before, the base set
``custom_hooks`` and a config with its own ended in mmengine's "Duplicate
key" traceback); what cannot compose is refused in one line."""
import os.path as osp

import pytest
import torch
from builders import DEMO_ELLIPTICAL, ROOT, tiny_config
from mmengine.config import Config
from mmseg.registry import RUNNERS
from processes import refused, run_tool_main

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.engine import AdversarialTrainingRunner
from mmseg_elliptical.engine.hooks import (AdversarialTrainingHook,
                                           SegSummaryHook)
from mmseg_elliptical.engine.hooks.adversarial_training import ACCURACY_KEY
from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.utils.hooks import RECIPE_KEY, with_recipe_hook

pytestmark = pytest.mark.usefixtures('single_thread')

BASE = osp.join(ROOT, 'configs', '_base_', 'adversarial_training.py')
DEMO_AT = osp.join(
    ROOT, 'configs', 'demo',
    'segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64_adversarial.py')


def composed(demo_root, tmp_path, extra: str = '') -> str:
    """A config file: the tiny demo (its custom_hooks: SegSummaryHook) and
    the adversarial base, inherited side by side."""
    tiny = tiny_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path / 'wd'),
                       **{'train_cfg.max_iters': 2})
    tiny.dump(str(tmp_path / 'tiny.py'))
    path = tmp_path / 'composed.py'
    path.write_text(f"_base_ = ['{tmp_path / 'tiny.py'}', '{BASE}']\n" + extra)
    return str(path)


def test_a_config_with_custom_hooks_trains_with_both(demo_root, tmp_path):
    cfg = Config.fromfile(composed(demo_root, tmp_path))
    runner = RUNNERS.build(cfg)  # as mmseg's tools/train.py builds it
    assert isinstance(runner, AdversarialTrainingRunner)
    kinds = [type(h) for h in runner.hooks]
    assert SegSummaryHook in kinds and AdversarialTrainingHook in kinds
    hook = next(
        h for h in runner.hooks if isinstance(h, AdversarialTrainingHook))
    assert (hook.attack.name, hook.attack.eps, hook.attack.steps,
            hook.ratio) == ('pgd', 4, 5, 1.)
    runner.train()
    assert runner.message_hub.get_scalar(ACCURACY_KEY) is not None
    # The config the runner dumped has the hook in custom_hooks and no
    # recipe: it trains as it is (the recipe twice would be refused).
    dumped = Config.fromfile(osp.join(runner.work_dir, 'composed.py'))
    assert RECIPE_KEY not in dumped
    assert [h['type'] for h in dumped.custom_hooks
            ] == ['SegSummaryHook', 'AdversarialTrainingHook']
    assert with_recipe_hook(dumped) is dumped


def test_the_demo_recipe_is_the_base_with_the_cheap_attack():
    cfg = with_recipe_hook(Config.fromfile(DEMO_AT))
    assert [h['type'] for h in cfg.custom_hooks
            ] == ['SegSummaryHook', 'AdversarialTrainingHook']
    assert cfg.custom_hooks[1] == dict(
        type='AdversarialTrainingHook',
        attack=dict(
            name='pgd',
            norm='linf',
            eps=4,
            steps=1,
            step_size=5,
            random_start=True),
        ratio=1.)


#: Each shipped recipe as its paper or code writes it: (attack name, eps
#: on the 0-1 scale, steps, step on the 0-1 scale, random start, ratio).
#: PIR-AT: SEA's Pgd_Attack (alpha=1e-2, a zero delta) with N_ITERS 5
#: (ADE20K Segmenter, Pascal VOC) or 20 (ADE20K ConvNeXt), every image.
PAPER_RECIPES = {
    'adversarial_training.py': ('pgd', 4 / 255, 5, 1e-2, False, 1.),
    'adversarial_training_pirat_20.py': ('pgd', 4 / 255, 20, 1e-2, False, 1.),
    'adversarial_training_cheap.py': ('pgd', 4 / 255, 2, 1e-2, False, 1.),
    'adversarial_training_segpgd.py':
    ('segpgd', 8 / 255, 3, 2 / 255, True, 1.),
}


@pytest.mark.parametrize('name', sorted(PAPER_RECIPES))
def test_each_recipe_composes_into_the_hook_of_its_paper(
        name, demo_root, tmp_path):
    """Each recipe of configs/_base_ beside the tiny demo: one
    AdversarialTrainingHook after the demo's own hook, whose attack is the
    paper's in 0-255 levels (eps and step x 255)."""
    base = osp.join(ROOT, 'configs', '_base_', name)
    tiny = tiny_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path / 'wd'))
    tiny.dump(str(tmp_path / 'tiny.py'))
    path = tmp_path / 'composed.py'
    path.write_text(f"_base_ = ['{tmp_path / 'tiny.py'}', '{base}']\n")
    cfg = Config.fromfile(str(path))
    assert cfg.runner_type == 'AdversarialTrainingRunner'
    cfg = with_recipe_hook(cfg)
    assert [h['type'] for h in cfg.custom_hooks
            ] == ['SegSummaryHook', 'AdversarialTrainingHook']
    args = {k: v for k, v in cfg.custom_hooks[1].items() if k != 'type'}
    hook = AdversarialTrainingHook(**args)
    attack, want = hook.attack, PAPER_RECIPES[name]
    assert (attack.name, attack.steps, attack.random_start,
            hook.ratio) == (want[0], want[2], want[4], want[5])
    assert attack.norm == 'linf'
    assert attack.eps == pytest.approx(want[1] * 255)
    assert attack.step_size == pytest.approx(want[3] * 255)


@pytest.mark.parametrize(
    'extra, words',
    [("custom_hooks = [dict(type='AdversarialTrainingHook', "
      "attack=dict(name='pgd', eps=4, steps=1, step_size=4))]\n",
      'both adversarial_training and an AdversarialTrainingHook in '
      'custom_hooks: keep one'),
     ("runner_type = 'Runner'\n",
      "adversarial_training is read by runner_type='AdversarialTraining"
      "Runner' only"),
     ('adversarial_training = dict(ratoi=0.5)\n',
      "adversarial_training: AdversarialTrainingHook got an unexpected "
      "keyword argument 'ratoi'; did you mean 'ratio'?")])
def test_what_cannot_compose_is_one_line_before_any_work(
        extra, words, demo_root, tmp_path, capsys, monkeypatch):

    def forbidden(*args, **kwargs):
        raise AssertionError('a runner was built')

    monkeypatch.setattr(AdversarialTrainingRunner, 'from_cfg', forbidden)
    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    path = composed(demo_root, tmp_path, extra)
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, 'train.py', *args),
                   [path])
    assert f'train.py: error: {path}: ' in line and words in line, line


def test_the_runner_refuses_a_recipe_it_cannot_read(demo_root, tmp_path):
    cfg = Config.fromfile(composed(demo_root, tmp_path))
    cfg.adversarial_training = 'pgd'
    with pytest.raises(
            ConfigError,
            match='must be a dict of '
            "AdversarialTrainingHook's arguments"):
        RUNNERS.build(cfg)
    assert torch.get_num_threads() == 1


def test_two_bases_that_set_one_key_are_one_line(demo_root, tmp_path, capsys,
                                                 monkeypatch):
    """mmengine's "Duplicate key is not allowed among bases" traceback, as
    the adversarial base gave with any config that set custom_hooks."""
    other = tmp_path / 'other.py'
    other.write_text("runner_type = 'Runner'\n")
    path = composed(demo_root, tmp_path)
    with open(path) as f:
        text = f.read().replace(']', f", '{other}']", 1)
    with open(path, 'w') as f:
        f.write(text)
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, 'train.py', *args),
                   [path])
    assert f'two of the bases of {path} set the same keys ' \
        "({'runner_type'})" in line, line
