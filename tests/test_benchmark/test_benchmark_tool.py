"""``tools/analysis_tools/benchmark.py`` at tiny sizes: every output
(JSON, Markdown, CSV, plot), its targets and verdicts, two configs compiled;
``benchmark_overview.py`` (the table of runs) and ``benchmark_layer.py``
(the layer micro-benchmark)."""
import json

import pytest
from bench_builders import BENCH_MMSEG_VIT_T, BENCH_TINY_ARGS, BENCH_VIT_T
from processes import load_tool, refused

from mmseg_elliptical.benchmark.targets import judge

pytestmark = pytest.mark.usefixtures('single_thread')


@pytest.fixture(scope='module')
def tool():
    return load_tool('analysis_tools/benchmark.py')


def ratio(role, q1, q3, memory=None):
    return dict(
        role=role, time=(q1 + q3) / 2, time_q1=q1, time_q3=q3, memory=memory)


@pytest.mark.parametrize('row, expected', [
    (ratio('fused-dot', 0.99, 1.02, 1.01), ('<= 1.03', 'met', 'met')),
    (ratio('fused-dot', 1.02, 1.05, 1.02),
     ('<= 1.03', 'within noise', 'missed')),
    (ratio('fused-dot', 1.04, 1.06), ('<= 1.03', 'missed', None)),
    (ratio('mmseg-dot', 0.98, 0.99, 5.), ('< 1', 'met', None)),
    (ratio('mmseg-dot', 0.98, 1.00), ('< 1', 'within noise', None)),
    (ratio('mmseg-dot', 1.00, 1.00), ('< 1', 'missed', None)),
    (ratio('paper-ref', 0.5, 3.0, 9.), (None, None, None)),
])
def test_targets_and_verdicts(row, expected):
    judged = judge(row)
    assert (judged['time_target'], judged['time_verdict'],
            judged['memory_verdict']) == expected
    assert judged['memory_target'] == ('<= 1.01' if row['role'] == 'fused-dot'
                                       and row['memory'] else None)


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
        assert len(r['round_ms']) == 2 and r['memory_measure'] == 'tensors'
        assert r['peak_mem_mb'] > 0
        assert (r['saved_mb'] is None) == (r['mode'] == 'infer')
    train = {
        r['model']: r['saved_mb']
        for r in saved['results'] if r['mode'] == 'train'
    }
    # The explicit path keeps the probabilities for the backward.
    assert train['paper-ref'] > train['fused-dot']
    assert len(saved['ratios']) == 3 * 3
    assert all(r == judge(dict(r)) for r in saved['ratios'])
    md = (out / 'benchmark.md').read_text()
    assert '| fused-dot | 64 | training step |' in _cells(md)
    assert '<= 1.03: ' in md and '< 1: ' in md
    header = (out / 'benchmark.csv').read_text().splitlines()[0]
    assert header.startswith('model,family,role,size,mode')
    assert (out / 'benchmark.png').stat().st_size > 0
    # The overview of runs: a row per size and baseline, read from the JSON.
    text = load_tool('analysis_tools/benchmark_overview.py').main(
        [str(out), str(out), '--out-dir',
         str(tmp_path / 'overview')])
    assert (tmp_path / 'overview' / 'overview.md').read_text() == text
    rows = [[c.strip() for c in line.strip('|').split('|')]
            for line in text.splitlines()[2:]]
    keys = {(r['size'], r['baseline']) for r in saved['ratios']}
    assert len(rows) == 2 * len(keys) == 12  # each run given twice
    by_key = {(r[0], r[1]): r for r in rows}
    for ratio in saved['ratios']:
        row = by_key[(f"{ratio['family']} at {ratio['size']}, batch 1",
                      ratio['baseline'])]
        time_cell = row[2 if ratio['mode'] == 'infer' else 3]
        median, iqr = time_cell.split(' (')
        q1, q3 = iqr.rstrip(')').split('-')
        assert [float(median), float(q1), float(q3)] == pytest.approx(
            [ratio['time'], ratio['time_q1'], ratio['time_q3']], abs=5e-4)
        memory = row[4 if ratio['mode'] == 'infer' else 5]
        assert float(memory) == pytest.approx(ratio['memory'], abs=5e-4)
    family = saved['ratios'][0]['family']
    assert by_key[(f'{family} at 32, batch 1', 'fused-dot')][3] == '-'


def test_cli_attack_steps(tool, tmp_path):
    """``--attack-sizes``: both attack steps' rows, ratios and adaptive /
    plain in the JSON, markdown, CSV and overview; the plain attack step is
    judged, the adaptive one reported."""
    out = tmp_path / 'bench'
    report = tool.main([
        BENCH_VIT_T, '--sizes', '32', '64', '--train-sizes', '--attack-sizes',
        '64', '--rounds', '2', '--flops-sizes', '--out-dir',
        str(out), *BENCH_TINY_ARGS
    ])
    assert sorted({(r['size'], r['mode'])
                   for r in report['results']}) == [(32, 'infer'),
                                                    (64, 'attack'),
                                                    (64, 'attack-adaptive'),
                                                    (64, 'infer')]
    judged = {(r['role'], r['mode']): r for r in report['ratios']}
    assert judged[('fused-dot', 'attack')]['time_target'] == '<= 1.03'
    assert judged[('mmseg-dot', 'attack')]['time_target'] == '< 1'
    assert judged[('fused-dot', 'attack-adaptive')]['time_target'] is None
    assert judged[('fused-dot', 'attack-adaptive')]['memory_verdict'] is None
    adaptive = report['adaptive_ratios']
    assert [r['model']
            for r in adaptive] == ['elliptical', 'fused-dot', 'mmseg-dot']
    md = _cells((out / 'benchmark.md').read_text())
    assert '| fused-dot | 64 | attack step |' in md
    assert '| mmseg-dot | 64 | adaptive attack step |' in md
    assert '**adaptive attack step** / attack step' in md
    assert f"| elliptical | 64 | {adaptive[0]['time']:.3f} |" in md
    csv = (out / 'benchmark.csv').read_text()
    assert ',64,attack-adaptive,' in csv
    text = load_tool('analysis_tools/benchmark_overview.py').main(
        [str(out), '--out-dir', str(tmp_path)])
    table, rest = text.split('\n\nAdaptive attack step / attack step')
    header, *rows = [[c.strip() for c in line.strip('|').split('|')]
                     for line in table.splitlines() if line.startswith('|')]
    assert header[2:] == [
        f'{q} {step}' for q in ('time', 'peak memory')
        for step in ('inference', 'training step', 'attack step',
                     'adaptive attack step')
    ]
    by_key = {(r[0], r[1]): r for r in rows[1:]}
    family = report['ratios'][0]['family']
    row = by_key[(f'{family} at 64, batch 1', 'mmseg-dot')]
    assert row[3] == '-'  # no training step
    ratio = judged[('mmseg-dot', 'attack-adaptive')]
    assert row[5] == (f"{ratio['time']:.3f} ({ratio['time_q1']:.3f}-"
                      f"{ratio['time_q3']:.3f})")
    assert float(row[9]) == pytest.approx(ratio['memory'], abs=5e-4)
    assert by_key[(f'{family} at 32, batch 1', 'fused-dot')][4] == '-'
    lines = _cells(rest).splitlines()
    assert (
        f"| {family} at 64, batch 1 | fused-dot | {adaptive[1]['time']:.3f} "
        f"({adaptive[1]['time_q1']:.3f}-{adaptive[1]['time_q3']:.3f}) | "
        f"{adaptive[1]['memory']:.3f} |") in lines
    with pytest.raises(SystemExit):  # not among --sizes
        tool.parse_args(['--sizes', '32', '--attack-sizes', '64'])


@pytest.mark.slow  # torch.compile
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
    layer = load_tool('analysis_tools/benchmark_layer.py').main(
        ['17', '24', '3', '--rounds', '2', '--out-dir',
         str(tmp_path)])
    assert set(layer['results']) == {
        'dot-product', 'elliptical no-grad', 'elliptical grad',
        'elliptical explicit'
    }
    assert all(r['rounds'] == 2 for r in layer['ratios'].values())
    assert '| elliptical grad |' in _cells((tmp_path / 'layer.md').read_text())


def test_overview_and_layer_check_their_arguments(tmp_path):
    with pytest.raises(SystemExit):
        load_tool('analysis_tools/benchmark_overview.py').main(
            [str(tmp_path)])  # no benchmark.json there
    with pytest.raises(SystemExit):
        load_tool('analysis_tools/benchmark_layer.py').main(['17', '24'])


def _cells(markdown: str) -> str:
    """``markdown`` with each table cell's padding removed."""
    return '\n'.join('| ' + ' | '.join(c.strip()
                                       for c in line.strip('|').split('|')) +
                     ' |' if line.startswith('|') else line
                     for line in markdown.splitlines())


def test_onnxruntime_without_the_deploy_extra_is_one_line(
        tool, capsys, monkeypatch):
    from mmseg_elliptical.utils import files
    monkeypatch.setattr(files, 'missing_packages', lambda: ('onnxruntime', ))
    line = refused(capsys, tool.main, ['--onnxruntime'])
    assert '--onnxruntime needs onnxruntime, which are not installed; ' \
        'install the deploy extra: pip install' in line, line


def test_the_options_are_the_command_lines(tool):
    from mmseg_elliptical.benchmark import BenchmarkOptions
    args = tool.parse_args([
        '--sizes', '64', '32', '--attack-sizes', '32', '--compile',
        '--compile-backend', 'eager'
    ])
    options = BenchmarkOptions.from_args(args)
    assert (options.sizes, options.train_sizes, options.flops_sizes,
            options.attack_sizes) == ([64, 32], [64, 32], [64, 32], [32])
    assert options.compile == 'eager'
    args = tool.parse_args(['--train-sizes', '512'])
    assert BenchmarkOptions.from_args(args).compile is None


@pytest.mark.parametrize('mode, per_layer', [('infer', 3), ('train', None)])
def test_profile_kernels_counts_what_the_layers_add(tmp_path, mode, per_layer):
    """The shrunk ViT-T (3 layers, 2 elliptical) on the CPU: in inference
    the op, the hand-on copy and the scaling per elliptical layer (the
    dispatch-hook count of test_fused.py, here from the profiler); both
    traces written."""
    report = load_tool('analysis_tools/profile_kernels.py').main([
        BENCH_VIT_T, '--size', '64', '--mode', mode, '--work-dir',
        str(tmp_path)
    ] + BENCH_TINY_ARGS)
    assert report['elliptical_layers'] == 2
    assert report['elliptical'] > report['fused-dot'] > 0
    if per_layer is not None:
        assert report['added_per_layer'] == per_layer
    for name in ('elliptical.json', 'fused-dot.json', 'kernels.json'):
        assert (tmp_path / name).stat().st_size > 0
