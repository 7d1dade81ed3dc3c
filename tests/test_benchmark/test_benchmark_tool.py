"""``tools/analysis_tools/benchmark.py`` at tiny sizes: every output
(JSON, Markdown, CSV, plot, the overview of runs), two configs compiled, the
layer micro-benchmark."""
import json

import pytest
from helpers import BENCH_MMSEG_VIT_T, BENCH_TINY_ARGS, BENCH_VIT_T, load_tool

pytestmark = pytest.mark.usefixtures('single_thread')


@pytest.fixture(scope='module')
def tool():
    return load_tool('analysis_tools/benchmark.py')


def test_cli_outputs(tool, tmp_path):
    out = tmp_path / 'bench'
    report = tool.main([
        BENCH_VIT_T, '--sizes', '32', '64', '--train-sizes', '64', '--rounds',
        '2', '--roles', 'elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref',
        '--saved-tensors', '--flops-sizes', '64', '--out-dir',
        str(out), *BENCH_TINY_ARGS
    ])
    saved = json.loads((out / 'benchmark.json').read_text())
    assert saved == json.loads(json.dumps(report))
    names = [m['name'] for m in saved['models']]
    assert names == ['elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref']
    flops = {m['name']: m['flops']['64'] for m in saved['models']}
    assert flops['elliptical'] == flops['fused-dot'] == flops['paper-ref']
    assert len(saved['results']) == 4 * 3  # 2 inference sizes + 1 train
    for r in saved['results']:
        assert len(r['round_ms']) == 2 and r['memory_measure'] == 'VmHWM'
        assert (r['saved_mb'] is None) == (r['mode'] == 'infer')
    train = {
        r['model']: r['saved_mb']
        for r in saved['results'] if r['mode'] == 'train'
    }
    # The explicit path keeps the probabilities for the backward.
    assert train['paper-ref'] > train['fused-dot']
    assert len(saved['ratios']) == 3 * 3
    md = (out / 'benchmark.md').read_text()
    assert '| fused-dot | 64 | training step |' in md
    assert '<= 1.03: ' in md and '< 1: ' in md
    header = (out / 'benchmark.csv').read_text().splitlines()[0]
    assert header.startswith('model,family,role,size,mode')
    assert (out / 'benchmark.png').stat().st_size > 0
    # The overview of runs: a row per size and baseline, read from the JSON.
    text = tool.main([
        '--overview',
        str(out),
        str(out), '--out-dir',
        str(tmp_path / 'overview')
    ])
    assert (tmp_path / 'overview' / 'overview.md').read_text() == text
    rows = [line.strip('|').split(' | ') for line in text.splitlines()[2:]]
    keys = {(r['size'], r['baseline']) for r in saved['ratios']}
    assert len(rows) == 2 * len(keys) == 12  # each run given twice
    by_key = {(r[0].strip(), r[1]): r for r in rows}
    for ratio in saved['ratios']:
        row = by_key[(f"{ratio['family']} at {ratio['size']}, batch 1",
                      ratio['baseline'])]
        time_cell = row[2 if ratio['mode'] == 'infer' else 3]
        median, iqr = time_cell.split(' (')
        q1, q3 = iqr.rstrip(')').split('-')
        assert [float(median), float(q1), float(q3)] == pytest.approx(
            [ratio['time'], ratio['time_q1'], ratio['time_q3']], abs=5e-4)
        memory = row[4 if ratio['mode'] == 'infer' else 5].strip()
        assert float(memory) == pytest.approx(ratio['memory'], abs=5e-4)
    family = saved['ratios'][0]['family']
    assert by_key[(f'{family} at 32, batch 1', 'fused-dot')][3] == '-'


def test_cli_two_configs_compiled_and_layer(tool, tmp_path):
    from torch._dynamo.utils import counters
    graphs = counters['stats']['unique_graphs']
    report = tool.main([
        BENCH_VIT_T, BENCH_MMSEG_VIT_T, '--names', 'ell', 'mm', '--sizes',
        '32', '--train-sizes', '--flops-sizes', '--rounds', '1', '--memory',
        'none', '--compile', '--compile-backend', 'eager', '--out-dir',
        str(tmp_path), *BENCH_TINY_ARGS
    ])
    # elliptical, fused-dot and mmseg-dot (the two configs' twins share)
    assert counters['stats']['unique_graphs'] >= graphs + 3
    assert [m['name'] for m in report['models']] == [
        'ell/elliptical', 'ell/fused-dot', 'ell/mmseg-dot', 'mm/elliptical',
        'mm/fused-dot', 'mm/mmseg-dot'
    ]
    assert {(r['family'], r['baseline'])
            for r in report['ratios']} == {('ell', 'ell/fused-dot'),
                                           ('ell', 'ell/mmseg-dot'),
                                           ('mm', 'mm/fused-dot'),
                                           ('mm', 'mm/mmseg-dot')}
    layer = tool.main([
        '--layer', '17', '24', '3', '--rounds', '2', '--out-dir',
        str(tmp_path)
    ])
    assert set(layer['results']) == {
        'dot-product', 'elliptical no-grad', 'elliptical grad',
        'elliptical explicit'
    }
    assert all(r['rounds'] == 2 for r in layer['ratios'].values())
    assert '| elliptical grad |' in (tmp_path / 'layer.md').read_text()
