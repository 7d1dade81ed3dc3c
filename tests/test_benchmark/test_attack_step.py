"""The benchmark's attack steps (``attack``, ``attack-adaptive``): forward and
backward to the input on the tiny model of every family, the gradient
through ``m`` only where a model is elliptical, and their rows and ratios."""
import os.path as osp

import pytest
import torch
from bench_builders import BENCH_TINY, tiny_family_variants
from builders import BACKBONES, ROOT, TINY_MODELS

from mmseg_elliptical.benchmark import runner as runner_module
from mmseg_elliptical.benchmark.runner import (BenchmarkOptions, run_benchmark,
                                               runner_of)
from mmseg_elliptical.benchmark.timing import paired_ratio
from mmseg_elliptical.benchmark.variants import (ATTACK_MODES, build_model,
                                                 derive_variants, make_step,
                                                 output_sum)
from mmseg_elliptical.models import adaptive_relevance
from mmseg_elliptical.utils.config import load_config

pytestmark = pytest.mark.usefixtures('single_thread')

# BEiT / MAE size their position tables from img_size: square for the runs.
SQUARE = dict(beit=dict(img_size=32), mae=dict(img_size=32))


def input_gradient(model, x, adaptive):
    """The gradient of the output sum w.r.t. ``x`` by ``backward`` on a leaf
    of its own, the model in eval mode."""
    leaf = x.clone().requires_grad_(True)
    model.eval()
    with adaptive_relevance(model) if adaptive else torch.enable_grad():
        output_sum(model(leaf)).backward()
    model.zero_grad(set_to_none=True)
    return leaf.grad


def attack_gradients(specs, x):
    """Each variant's (plain, adaptive) input gradient from the benchmark's
    steps, with the checks every attack step must pass."""
    grads = {}
    for spec in specs:
        model = build_model(spec)
        model.train()  # the step must put it in eval mode
        steps = [make_step(model, x, mode) for mode in ATTACK_MODES]
        assert not model.training
        grads[spec.role] = [step() for step in steps]
        assert not any(m.training for m in model.modules())
        for grad in grads[spec.role]:
            assert grad.shape == x.shape and torch.isfinite(grad).all()
            assert grad.abs().sum() > 0
        assert all(p.grad is None for p in model.parameters())
        assert x.grad is None and not x.requires_grad
        if spec.role == 'elliptical':
            for grad, adaptive in zip(grads[spec.role], (False, True)):
                torch.testing.assert_close(grad,
                                           input_gradient(model, x, adaptive))
    return grads


def check_adaptive_only_where_elliptical(grads):
    plain, adaptive = grads.pop('elliptical')
    assert (adaptive - plain).abs().max() > 1e-3 * plain.abs().max()
    for role, (plain, adaptive) in grads.items():
        torch.testing.assert_close(adaptive, plain, rtol=0, atol=0, msg=role)


@pytest.mark.parametrize('family', BACKBONES)
def test_attack_steps_of_every_backbone(family):
    x = torch.randn(
        *TINY_MODELS[family].shape, generator=torch.Generator().manual_seed(1))
    # The segmentor: the sum of its logits, not of normalised features (whose
    # sum over channels LayerNorm makes constant), has a gradient.
    grads = attack_gradients(tiny_family_variants(family, whole_model=True), x)
    assert set(grads) == {'elliptical', 'fused-dot', 'mmseg-dot'}
    # The two dot-product models compute the same function.
    torch.testing.assert_close(grads['fused-dot'][0], grads['mmseg-dot'][0])
    check_adaptive_only_where_elliptical(grads)


def test_attack_steps_of_the_elliptical_segmenter_head():
    """The whole segmentor with a dot-product backbone: what the adaptive
    step changes comes from the head's layers."""
    config = osp.join(
        ROOT, 'configs', 'segmenter',
        'segmenter_elliptical-vit-t_elliptical-mask_8xb1-160k_ade20k-'
        '512x512.py')
    cfg = load_config(
        config,
        dict(
            BENCH_TINY, **{
                'model.backbone.elliptical_layers': [],
                'model.decode_head.num_layers': 2,
            }),
        no_pretrained=True)
    specs = derive_variants(
        'head', config, cfg.model.to_dict(), whole_model=True)
    grads = attack_gradients(specs, torch.randn(2, 3, 32, 32))
    check_adaptive_only_where_elliptical(grads)


@pytest.mark.slow  # torch.compile
def test_compiled_attack_steps_follow_the_switch():
    """Compiled, each step runs the graph of its own mode, in any order (the
    switch swaps module globals, which dynamo guards)."""
    spec = tiny_family_variants('vit', ('elliptical', ), whole_model=True)[0]
    model = build_model(spec)
    x = torch.randn(1, 3, 32, 32)
    compiled = runner_of(model, BenchmarkOptions(compile='eager'))
    eager = [make_step(model, x, m)() for m in ATTACK_MODES]
    for mode in (*ATTACK_MODES, 'attack'):
        torch.testing.assert_close(
            make_step(model, x, mode, runner=compiled)(),
            eager[ATTACK_MODES.index(mode)])


def test_unknown_mode_is_refused():
    model = build_model(tiny_family_variants('vit', ('elliptical', ))[0])
    with pytest.raises(ValueError, match="mode='adaptive' must be one of"):
        make_step(model, torch.randn(1, 3, 32, 32), 'adaptive')


@pytest.mark.parametrize('family', BACKBONES)
def test_attack_rows_of_every_backbone(family, monkeypatch):
    specs = tiny_family_variants(family, **SQUARE.get(family, {}))
    timed = []
    interleaved = runner_module.run_interleaved
    monkeypatch.setattr(
        runner_module, 'run_interleaved', lambda timers, *a:
        (timed.append(sorted(timers)), interleaved(timers, *a))[1])
    options = BenchmarkOptions(
        sizes=[32],
        train_sizes=[],
        attack_sizes=[32],
        rounds=2,
        warmup=0,
        memory='tensors' if family == 'vit' else 'none')
    report = run_benchmark(specs, options)
    names = [s.name for s in specs]
    assert [(r['model'], r['mode']) for r in report['results']
            ] == [(n, m) for m in ('infer', *ATTACK_MODES) for n in names]
    # Both attack steps of every model are timed in the same rounds.
    assert timed[1] == sorted(f'{n} ({m})' for n in names
                              for m in ATTACK_MODES)
    rows = {(r['baseline'], r['mode']): r for r in report['ratios']}
    assert list(rows) == [(b, m) for b in ('fused-dot', 'mmseg-dot')
                          for m in ('infer', *ATTACK_MODES)]
    results = {(r['model'], r['mode']): r for r in report['results']}
    for (base, mode), row in rows.items():
        expected = paired_ratio(results[('elliptical', mode)]['round_ms'],
                                results[(base, mode)]['round_ms'])
        assert (row['time'], row['time_q1'], row['time_q3']) == \
            pytest.approx((expected.median, expected.q1, expected.q3))
    adaptive = report['adaptive_ratios']
    assert [(r['model'], r['size'], r['rounds'])
            for r in adaptive] == [(n, 32, 2) for n in names]
    for row in adaptive:
        plain, through_m = (results[(row['model'], m)] for m in ATTACK_MODES)
        assert row['time'] == pytest.approx(
            paired_ratio(through_m['round_ms'], plain['round_ms']).median)
        if family == 'vit':
            assert row['memory'] == pytest.approx(through_m['peak_mem_mb'] /
                                                  plain['peak_mem_mb'])
            assert plain['peak_mem_mb'] > 0
        else:
            assert row['memory'] is None


def test_groups_and_attack_sizes():
    options = BenchmarkOptions(
        sizes=[32, 64], train_sizes=[64], attack_sizes=[32])
    assert options.groups() == [(32, ('infer', )), (32, ATTACK_MODES),
                                (64, ('infer', )), (64, ('train', ))]
    assert BenchmarkOptions().attack_sizes == []  # opt in
    with pytest.raises(ValueError, match=r'attack sizes \[128\] are not'):
        run_benchmark([],
                      BenchmarkOptions(
                          sizes=[64], train_sizes=[], attack_sizes=[128]))
