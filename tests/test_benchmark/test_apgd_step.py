"""The benchmark's APGD mode (``attack-apgd``): what is timed is a run of the
grid's own APGD-MCE on the benchmarked forward, its time is reported per
iteration, beside PGD's attack step in the same rounds, with its ratios."""
import re

import pytest
import torch
from bench_builders import tiny_family_variants
from builders import BACKBONES, TINY_MODELS
from processes import load_tool, refused

from mmseg_elliptical.benchmark import apgd_step as bench_step
from mmseg_elliptical.benchmark import runner as runner_module
from mmseg_elliptical.benchmark.apgd_step import (APGD_MODE, MID, SCALE,
                                                  attacked_logits,
                                                  per_iteration)
from mmseg_elliptical.benchmark.reporting import markdown
from mmseg_elliptical.benchmark.runner import BenchmarkOptions, run_benchmark
from mmseg_elliptical.benchmark.timing import paired_ratio
from mmseg_elliptical.benchmark.variants import (ATTACK_MODES, build_model,
                                                 make_step)
from mmseg_elliptical.robustness.attacks import apgd as grid_apgd

pytestmark = pytest.mark.usefixtures('single_thread')


def grid_apgd_run(model, x, steps, seed=0):
    """The grid's APGD-MCE called here on the model's last 4-D output: the
    clean prediction as labels, the start a seeded point of the ball; the
    adversarial and clean images and the forwards with an input gradient."""
    x0 = list((x * SCALE + MID).clamp(0, 255))
    grads = []

    def forward(xs):
        grads.append(torch.is_grad_enabled())
        out = model((torch.stack(xs) - MID) / SCALE)
        while not isinstance(out, torch.Tensor):
            out = [
                o for o in out
                if not isinstance(o, torch.Tensor) or o.dim() == 4
            ][-1]
        return list(out.float())

    gen = torch.Generator().manual_seed(seed)
    noise = [torch.rand(t.shape, generator=gen) * 2 - 1 for t in x0]
    with torch.no_grad():
        labels = [lg.argmax(0) for lg in forward(x0)]
    xs, _ = grid_apgd.apgd(forward, x0, labels,
                           lambda j, r: x0[j] + r * noise[j], 'apgd-mce',
                           'linf', 4., steps)
    return torch.stack(xs), torch.stack(x0), sum(grads[1:])


@pytest.mark.parametrize('family', BACKBONES)
@pytest.mark.parametrize('whole_model', [False, True])
def test_apgd_step_is_the_grids_apgd(family, whole_model, monkeypatch):
    spec = tiny_family_variants(family, ('elliptical', ), whole_model)[0]
    model = build_model(spec)
    model.train()  # the step must put it in eval mode
    x = torch.randn(
        *TINY_MODELS[family].shape, generator=torch.Generator().manual_seed(1))
    calls = []
    monkeypatch.setattr(
        bench_step, 'apgd', lambda *a, **k:
        (calls.append(a[4:]), grid_apgd.apgd(*a, **k))[1])
    step = make_step(model, x, APGD_MODE, apgd_steps=5)
    assert not any(m.training for m in model.modules())
    adversarial = step()
    assert calls == [('apgd-mce', 'linf', 4., 5)]
    assert all(p.grad is None for p in model.parameters())
    assert adversarial.shape == x.shape
    expected, x0, iterations = grid_apgd_run(model, x, 5)
    torch.testing.assert_close(adversarial, expected)
    # One forward with an input gradient per iteration: 5 unless every image
    # reached 0 accuracy in a stage (SEA's early stop).
    assert step.iterations == iterations and 1 <= iterations <= 5
    moved = (adversarial - x0).abs()
    assert moved.max() <= 4 + 1e-4 and moved.max() > 1
    assert adversarial.min() >= 0 and adversarial.max() <= 255
    # Each call does the same work.
    torch.testing.assert_close(step(), adversarial)
    assert step.iterations == iterations and len(calls) == 2


def test_attacked_logits_of_nested_outputs():
    a, b, c = torch.zeros(1, 2, 3, 3), torch.ones(1, 4, 2,
                                                  2), torch.ones(1, 5, 3)
    assert attacked_logits(a) is a
    assert attacked_logits((a, [b, c])) is b
    assert attacked_logits(((a, ), (c, ))) is a


def test_per_iteration():
    stats = dict(
        times_ms=[8., 12.],
        round_ms=[10., 20.],
        median_ms=10.,
        iqr_ms=4.,
        images_per_s=100.,
        model='m')
    assert per_iteration(stats, 4) == dict(
        times_ms=[2., 3.],
        round_ms=[2.5, 5.],
        median_ms=2.5,
        iqr_ms=1.,
        images_per_s=400.,
        model='m',
        iterations=4)


def test_apgd_rows(monkeypatch):
    specs = tiny_family_variants('vit')
    raw = {}
    interleaved = runner_module.run_interleaved

    def spy(timers, *args):
        out = interleaved(timers, *args)
        raw.update(out)
        return out

    monkeypatch.setattr(runner_module, 'run_interleaved', spy)
    made = []  # the APGD steps, in the order of the models
    make = runner_module.make_step

    def step_spy(model, x, mode, *args):
        made.append((mode, make(model, x, mode, *args)))
        return made[-1][1]

    monkeypatch.setattr(runner_module, 'make_step', step_spy)
    options = BenchmarkOptions(
        sizes=[32],
        train_sizes=[],
        attack_sizes=[32],
        apgd_steps=4,
        rounds=2,
        warmup=0)
    assert options.groups()[1] == (32, ATTACK_MODES + (APGD_MODE, ))
    report = run_benchmark(specs, options)
    names = [s.name for s in specs]
    # APGD is timed in the attack steps' rounds.
    assert f'elliptical ({APGD_MODE})' in raw and 'elliptical (attack)' in raw
    results = {(r['model'], r['mode']): r for r in report['results']}
    apgds = [step for mode, step in made if mode == APGD_MODE]
    assert [s.iterations for s in apgds] == [4, 4, 4]  # none stopped early
    for name, apgd in zip(names, apgds):
        row = results[(name, APGD_MODE)]
        assert row['iterations'] == apgd.iterations
        assert row['round_ms'] == pytest.approx([
            m.median * 1e3 / apgd.iterations
            for m in raw[f'{name} ({APGD_MODE})']
        ])
        assert row['peak_mem_mb'] > 0
    ratios = {(r['baseline'], r['mode']): r for r in report['ratios']}
    for base in ('fused-dot', 'mmseg-dot'):
        assert ratios[(base, APGD_MODE)]['time'] == pytest.approx(
            paired_ratio(results[('elliptical', APGD_MODE)]['round_ms'],
                         results[(base, APGD_MODE)]['round_ms']).median)
    rows = report['apgd_ratios']
    assert [(r['model'], r['size'], r['iterations']) for r in rows] == [
        (n, 32, results[(n, APGD_MODE)]['iterations']) for n in names
    ]
    for r in rows:
        apgd, pgd = results[(r['model'], APGD_MODE)], results[(r['model'],
                                                               'attack')]
        assert r['time'] == pytest.approx(
            paired_ratio(apgd['round_ms'], pgd['round_ms']).median)
        assert (r['apgd_ms'], r['pgd_ms']) == (apgd['median_ms'],
                                               pgd['median_ms'])
        assert r['memory'] == pytest.approx(apgd['peak_mem_mb'] /
                                            pgd['peak_mem_mb'])
    text = markdown(report)
    assert '**APGD-MCE iteration** / attack step' in text
    assert '| elliptical | 32 | APGD-MCE iteration |' in re.sub(
        ' +', ' ', text)


def test_apgd_is_opt_in_and_checked(capsys):
    assert BenchmarkOptions(attack_sizes=[512]).groups()[-1][1] == \
        ATTACK_MODES
    with pytest.raises(ValueError, match='apgd_steps=3: APGD-MCE needs >= 4'):
        run_benchmark([],
                      BenchmarkOptions(
                          sizes=[32], train_sizes=[], apgd_steps=3))
    tool = load_tool('analysis_tools/benchmark.py')
    assert 'APGD-MCE needs >= 4' in refused(capsys, tool.main,
                                            ['--apgd-steps', '2'])
