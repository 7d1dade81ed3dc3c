"""The benchmark's adversarial-training mode: what is timed is the hook's
attack on the batch, then the real step on what the attack gave (every
family), the plain step the same without the attack; the rows and ratios
of the interleaved rounds; the recipes are the configs'; the tool's
``--at-sizes``."""
import dataclasses
import json
import os.path as osp
import re

import pytest
import torch
from bench_builders import BENCH_TINY_ARGS, BENCH_VIT_T, tiny_family_variants
from builders import BACKBONES, ROOT
from mmengine.config import Config
from processes import load_tool, refused

from mmseg_elliptical.benchmark import training as training_benchmark
from mmseg_elliptical.benchmark.runner import BenchmarkOptions
from mmseg_elliptical.benchmark.timing import paired_ratio
from mmseg_elliptical.benchmark.training import (PLAIN, RECIPES,
                                                 measure_training,
                                                 training_segmentor,
                                                 training_steps)
from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.robustness.attacks import \
    training as adversarial_training

pytestmark = pytest.mark.usefixtures('single_thread')

PREPROCESSOR = dict(
    type='SegDataPreProcessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255,
    size=(512, 512))
# BEiT / MAE size their position tables from img_size: square for the runs.
SQUARE = dict(beit=dict(img_size=32), mae=dict(img_size=32))


def trained_specs(family, roles=('elliptical', )):
    """The tiny family's variants with an mmseg data preprocessor."""
    return [
        dataclasses.replace(
            s, model_cfg=dict(s.model_cfg, data_preprocessor=PREPROCESSOR))
        for s in tiny_family_variants(family, roles, **SQUARE.get(family, {}))
    ]


def test_recipes_are_the_configs():
    base = Config.fromfile(
        osp.join(ROOT, 'configs', '_base_', 'adversarial_training_cheap.py'))
    demo = Config.fromfile(
        osp.join(
            ROOT, 'configs', 'demo', 'segmenter_vit-mini-p8_mask_1xb8-3k_'
            'demo-shapes-64x64_adversarial.py'))
    assert RECIPES == {
        'pgd-1': demo.adversarial_training.attack,
        'pgd-at-2': base.adversarial_training.attack
    }


@pytest.mark.parametrize('family', BACKBONES)
def test_steps_attack_then_train(family, monkeypatch):
    spec, = trained_specs(family)
    steps = training_steps(spec, 32, BenchmarkOptions(batch_size=2))
    model = steps[PLAIN].model
    assert model.data_preprocessor.size == (32, 32)
    assert all(s.model is model for s in steps.values())
    crafted, trained = [], []
    perturb = adversarial_training.CRAFTERS['pgd']

    def craft(*args, **kwargs):
        xs = perturb(*args, **kwargs)
        crafted.append((args[3], kwargs['forward'], xs))
        return xs

    monkeypatch.setitem(adversarial_training.CRAFTERS, 'pgd', craft)
    train_step = model.train_step

    def spy(data, wrapper):
        trained.append([x.clone() for x in data['inputs']])
        assert model.training and all(p.requires_grad
                                      for p in model.parameters())
        return train_step(data, wrapper)

    monkeypatch.setattr(model, 'train_step', spy)
    clean = [x.clone() for x in steps[PLAIN].batch['inputs']]
    for recipe, step in steps.items():
        before = [p.detach().clone() for p in model.parameters()]
        crafted.clear()
        log = step()
        assert torch.isfinite(log['loss'])
        # The real step: the optimiser moved the weights.
        assert any(not torch.equal(a, p)
                   for a, p in zip(before, model.parameters()))
        inputs = trained.pop()
        assert len(inputs) == 2 and not trained
        if recipe == PLAIN:
            assert not crafted
            for x, c in zip(inputs, clean):
                torch.testing.assert_close(x, c, rtol=0, atol=0)
            continue
        (attack, forward, xs), = crafted
        assert forward is not None  # the hook's training-time forward
        assert (attack.steps, attack.step_size, attack.eps,
                attack.random_start) == tuple(RECIPES[recipe][k]
                                              for k in ('steps', 'step_size',
                                                        'eps', 'random_start'))
        for x, a, c in zip(inputs, xs, clean):
            torch.testing.assert_close(x, a, rtol=0, atol=0)
            assert 0 < (x - c).abs().max() <= 4 + 1e-4
    # Each step attacks a copy: the batch stays clean.
    for x, c in zip(steps[PLAIN].batch['inputs'], clean):
        assert torch.equal(x, c)


def test_training_rows(monkeypatch):
    specs = trained_specs('vit', ('elliptical', 'fused-dot'))
    timed = []
    interleaved = training_benchmark.run_interleaved
    monkeypatch.setattr(
        training_benchmark, 'run_interleaved', lambda timers, *a:
        (timed.append(interleaved(timers, *a)), timed[-1])[1])
    options = BenchmarkOptions(rounds=2, warmup=0)
    rows = measure_training(specs, [32], options)
    raw, = timed  # every model and recipe in the same rounds
    assert sorted(raw) == sorted(
        (s.name, r) for s in specs for r in (PLAIN, *RECIPES))
    assert [(r['model'], r['recipe'], r['size'], r['rounds']) for r in rows
            ] == [(s.name, r, 32, 2) for s in specs for r in RECIPES]
    for row in rows:
        at, plain = ([m.median * 1e3 for m in raw[(row['model'], recipe)]]
                     for recipe in (row['recipe'], PLAIN))
        assert row['time'] == pytest.approx(paired_ratio(at, plain).median)
        assert row['attack'] == RECIPES[row['recipe']]
        assert row['plain_ms'] > 0 and row['at_ms'] > 0


def test_a_model_the_hook_refuses():
    spec = tiny_family_variants('vit', ('elliptical', ))[0]
    with pytest.raises(ConfigError, match='SegDataPreProcessor'):
        training_segmentor(spec, 32)


def test_tool_at_sizes(tmp_path):
    report = load_tool('analysis_tools/benchmark.py').main([
        BENCH_VIT_T, '--roles', 'elliptical', '--sizes', '32', '--train-sizes',
        '--at-sizes', '32', '--rounds', '1', '--warmup', '0', '--memory',
        'none', '--out-dir',
        str(tmp_path), *BENCH_TINY_ARGS
    ])
    rows = json.loads(
        (tmp_path / 'benchmark.json').read_text())['adversarial_training']
    assert rows == json.loads(json.dumps(report['adversarial_training']))
    assert [(r['model'], r['recipe']) for r in rows] == [('elliptical', r)
                                                         for r in RECIPES]
    md = (tmp_path / 'benchmark.md').read_text()
    assert '**adversarial training step**' in md
    assert '| elliptical | 32 | pgd-at-2 |' in re.sub(' +', ' ', md)


def test_tool_refuses_what_the_hook_refuses(capsys, monkeypatch):
    tool = load_tool('analysis_tools/benchmark.py')
    # Refused before the other steps are timed.
    monkeypatch.setattr('mmseg_elliptical.benchmark.run_benchmark',
                        lambda *a: pytest.fail('timed before the refusal'))
    line = refused(capsys, tool.main, [
        BENCH_VIT_T, '--sizes', '32', '--at-sizes', '32', *BENCH_TINY_ARGS,
        'model.data_preprocessor.mean=[0.5,0.5,0.5]'
    ])
    assert 'AdversarialTrainingHook: the model needs an mmseg ' \
        'SegDataPreProcessor that normalises 0-255 images' in line
