"""``benchmark/runner.py``: ratios paired round by round, a prepared step
in a child process and under ``torch.compile``."""
import pytest
import torch
from helpers import tiny_variants

from mmseg_elliptical.benchmark.memory import peak_rss_in_child
from mmseg_elliptical.benchmark.models import (BenchModel, build_model,
                                               make_step)
from mmseg_elliptical.benchmark.runner import (BenchmarkOptions, prepared_step,
                                               ratios, runner_of)

pytestmark = pytest.mark.usefixtures('single_thread')


def test_ratios_pair_rounds_within_a_config():
    specs = [
        BenchModel(r, 'f', r, 'c.py', {})
        for r in ('elliptical', 'fused-dot', 'mmseg-dot')
    ]
    times = {
        'elliptical': [2., 4., 1.02],
        'fused-dot': [2., 4., 1.],
        'mmseg-dot': [1., 5., 2.]
    }
    mem = {'elliptical': 100.5, 'fused-dot': 100., 'mmseg-dot': 201.}
    results = [
        dict(
            model=n,
            size=64,
            mode='infer',
            round_ms=t,
            peak_mem_mb=mem[n],
            saved_mb=None) for n, t in times.items()
    ]
    rows = {r['baseline']: r for r in ratios(specs, results)}
    assert set(rows) == {'fused-dot', 'mmseg-dot'}
    fused, mmseg = rows['fused-dot'], rows['mmseg-dot']
    assert (fused['time'], fused['time_q1'], fused['time_q3']) == \
        pytest.approx((1., 1., 1.01))
    assert fused['memory'] == pytest.approx(1.005)
    assert (fused['time_verdict'], fused['memory_verdict']) == ('met', 'met')
    # Ratios 2, 0.8, 0.51: quartiles 0.655 and 1.4 around the bound 1.
    assert (mmseg['time'], mmseg['time_q1'], mmseg['time_q3']) == \
        pytest.approx((0.8, 0.655, 1.4))
    assert mmseg['time_verdict'] == 'within noise'
    assert mmseg['memory'] == pytest.approx(0.5)
    assert mmseg['memory_verdict'] is None and mmseg['saved'] is None


def test_prepared_step_in_child_and_eager_compile():
    spec = tiny_variants(('elliptical', ))[0]
    options = BenchmarkOptions(sizes=[64], train_sizes=[64])
    mb, measure = peak_rss_in_child(prepared_step, spec, 64, 'train', options)
    assert measure == 'VmHWM' and mb > 0
    model = build_model(spec)
    x = torch.randn(1, 3, 64, 64)
    compiled = runner_of(model, BenchmarkOptions(compile='eager'))
    assert compiled is not model
    step = make_step(model, x, 'train', runner=compiled)
    step()
    assert all(p.grad is not None for p in model.parameters()
               if p.requires_grad)
