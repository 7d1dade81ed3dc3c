"""Smoke test of tools/benchmark.py and its paper-reference attention."""
import importlib.util
import json
import os.path as osp
import sys

import pytest
import torch


ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
TINY = [
    '--cfg-options', 'model.backbone.num_layers=3',
    'model.backbone.embed_dims=48', 'model.backbone.img_size=64'
]


@pytest.fixture(scope='module')
def benchmark():
    """tools/benchmark.py imported as a module."""
    path = osp.join(ROOT, 'tools', 'benchmark.py')
    spec = importlib.util.spec_from_file_location('benchmark_tool', path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_smoke_outputs(benchmark, tmp_path) -> None:
    """Tiny sizes, 1 rep, in-process memory: every output is there."""
    out = tmp_path / 'bench'
    report = benchmark.main([
        '--sizes', '32', '64', '--train-sizes', '64', '--reps', '1',
        '--warmup', '0', '--flops-sizes', '64', '--memory', 'inline',
        '--paper-reference', '--saved-activations', '--out-dir',
        str(out), *TINY
    ])
    with open(out / 'benchmark.json') as f:
        saved = json.load(f)
    assert saved == json.loads(json.dumps(report))
    assert set(saved) == {'meta', 'models', 'results', 'ratios'}
    names = [m['name'] for m in saved['models']]
    assert names == ['elliptical', 'mmseg-dot', 'fused-dot', 'paper-ref']
    for m in saved['models']:
        assert {'params', 'flops', 'uncounted_ops', 'role'} <= set(m)
        assert m['params'] > 0 and m['flops']['64'] > 0
        # SDPA and baddbmm get a handle: no matmul is left uncounted.
        assert not {'aten::scaled_dot_product_attention',
                    'aten::baddbmm'} & set(m['uncounted_ops'])
    # Same weights, same attention matmuls: the SDPA handle counts what the
    # explicit path's two matmuls count (q * m is elementwise, not counted).
    flops = {m['name']: m['flops']['64'] for m in saved['models']}
    assert flops['elliptical'] == flops['fused-dot'] == flops['paper-ref']
    # 4 models x (2 inference sizes + 1 train size).
    assert len(saved['results']) == 12
    for r in saved['results']:
        assert {'model', 'size', 'tokens', 'mode', 'times_ms', 'median_ms',
                'iqr_ms', 'images_per_s', 'cpu_times_ms', 'median_cpu_ms',
                'peak_mem_mb', 'saved_mb'} <= set(r)
        assert (r['saved_mb'] is None) == (r['mode'] == 'infer')
        assert len(r['times_ms']) == len(r['cpu_times_ms']) == 1
        assert r['peak_mem_mb'] >= 0
    assert {(r['size'], r['tokens']) for r in saved['results']} == {(32, 5),
                                                                    (64, 17)}
    # 3 baselines x 2 sizes; train ratios only where trained.
    assert len(saved['ratios']) == 6
    for r in saved['ratios']:
        assert r['subject'] == 'elliptical'
        assert {'time_infer', 'time_train', 'cpu_infer', 'cpu_train',
                'mem_infer', 'mem_train', 'saved_train'} <= set(r)
        assert r['time_infer'] is not None
        assert (r['time_train'] is None) == (r['size'] == 32)
    table = (out / 'benchmark.md').read_text()
    assert '| fused-dot (fused-dot) | 64 | 17 |' in table
    assert '| paper-ref | 64 | 17 | train |' in table
    assert 'scaled_dot_product_attention' in table
    assert 'peak RSS increase' in saved['meta']['memory_measure']
    # The naive attention keeps the N x N probabilities for the backward.
    train = {r['model']: r['saved_mb'] for r in saved['results']
             if r['mode'] == 'train'}
    assert train['paper-ref'] > train['fused-dot'] > 0
    assert (out / 'benchmark.png').stat().st_size > 0


def test_peak_rss_measure(benchmark) -> None:
    """The child's measurement, run in this process: a size in MiB."""
    args = benchmark.parse_args(['--no-fused-baseline', *TINY])
    spec = benchmark.model_specs(args)[0]
    mb, measure = benchmark.peak_rss_mb(spec, 64, 1, 'train', 'cpu', False,
                                        0, None)
    assert mb >= 0 and measure in ('VmHWM', 'ru_maxrss')
