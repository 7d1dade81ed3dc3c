"""The comparison report on two tiny models: each section against an
independent computation, resumed without recomputing, refused when stale."""
import json
import os.path as osp

import numpy as np
import pytest
from evidence_oracles import robustness_by_hand
from mmengine.config import Config
from processes import load_tool, refused
from saved_models import hand_collapse, hand_miou

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical import benchmark
from mmseg_elliptical.analysis.comparison import sections

pytest.importorskip('imagecorruptions')

pytestmark = pytest.mark.usefixtures('single_thread')


def forbidden(what):

    def fail(*args, **kwargs):
        raise AssertionError(f'{what} was measured again')

    return fail


def test_report_on_two_tiny_models(demo_models, tmp_path, monkeypatch, capsys):
    tool = load_tool('analysis_tools/compare_models.py')
    work = str(tmp_path / 'report')
    # The dot-product model's config keeps mmseg's IoUMetric: the report
    # still gives its per-class IoU.
    cfg = Config.fromfile(demo_models[2])
    cfg.test_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
    cfg.dump(str(tmp_path / 'dot.py'))
    demo_models = demo_models[:2] + [str(tmp_path / 'dot.py'), demo_models[3]]
    argv = demo_models + [
        '--names', 'ell', 'dot', '--corruptions', 'gaussian_noise',
        '--severities', '3', '--max-images', '2', '--point', '30', '20',
        '--speed-size', '32', '--speed-rounds', '3', '--work-dir', work,
        '--attack-max-images', '1'
    ]
    data = tool.main(argv)
    names = ['ell', 'dot']
    grid = json.loads(open(osp.join(work, 'cells', 'robustness.json')).read())
    cells = {n: grid['models'][n]['cells'] for n in names}
    assert grid['summary'] == json.loads(json.dumps(data['robustness']))
    for i, name in enumerate(names):
        paths = demo_models[2 * i:2 * i + 2]
        acc = data['accuracy'][name]
        assert acc['mIoU'] == pytest.approx(hand_miou(paths, 2), abs=0.01)
        assert {'IoU.background', 'IoU.ring'} <= set(acc)
        summary = data['robustness'][name]
        assert summary['P'] == acc['mIoU']
        assert list(summary['grid']) == ['gaussian_noise']
        assert summary['baseline'] == 'dot'
        assert summary['mCE'] == pytest.approx(
            robustness_by_hand(cells, ['gaussian_noise'], [3], 'mIoU',
                               'dot')[name]['mCE'])
        cos, samples, _ = hand_collapse(paths, lambda bb: bb.layers[1],
                                        slice(1, None), 2)
        collapse = data['collapse'][name]
        assert collapse['cosine'][1] == pytest.approx(cos, abs=1e-6)
        assert collapse['samples'] == samples == 2
        assert sorted(data['attention']['models'][name]['layers']) == [1, 2]
        # The adversarial section: the quick preset, adaptive too where
        # there is m; its clean cell is the accuracy section's.
        attacked = data['adversarial'][name]
        assert attacked['clean'] == pytest.approx(
            hand_miou(paths, 1), abs=0.01)  # --attack-max-images 1
        series = ['apgd-mce/linf/5', 'pgd/linf/5', 'segpgd/linf/5']
        if name == 'ell':
            series = [
                f'{n}{a}/linf/5' for n in ('apgd-mce', 'pgd', 'segpgd')
                for a in ('-adaptive', '')
            ]
        assert [s for s in attacked['series'] if s in series] == series
        # The audit's cells (the preset's last attack doubled, square,
        # transfer from the other model) and verdict, reduced and saying so;
        # its eps sweep stays out of the worst case.
        other = 'dot' if name == 'ell' else 'ell'
        assert {'apgd-mce/linf/10', 'square/linf/20',
                f'pgd@{other}/linf/5'} <= set(attacked['series'])
        assert 'pgd/linf/10' not in attacked['series']
        # the reduced sweep: the preset's attack, 20 iterations, to 255
        assert attacked['series']['apgd-mce-bal/linf/20'].keys() == {
            '4', '255'
        }
        assert attacked['series']['pgd/linf/5'].keys() == {'1', '4'}
        assert attacked['audit']['verdict']
        assert 'not run with twice the steps: pgd' in attacked['audit'][
            'verdict']
        assert 'swept to 255 levels: apgd-mce-bal 20' in attacked['audit'][
            'verdict']
        assert sorted(attacked['worst']) == ['1', '4']
        for mode in ('infer', 'train'):
            row = data['speed'][name][mode]
            assert len(row['round_ms']) == 3 and row['median_ms'] > 0
            assert row['peak_mem_mb'] > 0
    assert data['attention']['point'] == (30, 20)
    # The speed table: each model over the reference (the last), per round.
    ratio = np.median(
        np.divide(data['speed']['ell']['infer']['round_ms'],
                  data['speed']['dot']['infer']['round_ms']))
    md = open(osp.join(work, 'report.md')).read()
    md = '\n'.join(' '.join(x.split()) for x in md.splitlines())  # padding
    rows = [line for line in md.splitlines() if line.count('|') == 10]
    assert rows[0].split(' | ')[5] == 'time inference / dot'
    assert rows[2].startswith('| ell | ')
    assert rows[2].split(' | ')[5].startswith(f'{ratio:.3f} (')
    assert rows[3].split(' | ')[5:7] == ['1.000 (1.000-1.000)', '1.000']
    for section in ('## Accuracy', '## Robustness', '## Adversarial',
                    '## Representation', '## Attention', '## Speed'):
        assert section in md
    paired = data['robustness']['ell']['paired']
    assert paired['baseline'] == 'dot' and paired['clean']['images'] == 2
    assert data['robustness']['dot']['paired'] is None
    assert (f'- ell - dot, clean mIoU: {paired["clean"]["difference"]:+.2f}'
            in md)
    assert '| model | P (mIoU) | mPC | rPC | mCE (against dot) | rmCE |' in md
    for name in ('report.md', 'report.json', 'robustness.png',
                 'adversarial.png', 'collapse.png', 'attention.png',
                 'attention_relevance.png'):
        assert osp.getsize(osp.join(work, name)) > 0
    saved = json.loads(open(osp.join(work, 'report.json')).read())

    # A finished report is not measured again.
    monkeypatch.setattr('mmengine.runner.Runner.from_cfg',
                        forbidden('a robustness cell'))
    monkeypatch.setattr(sections, 'measure_collapse', forbidden('collapse'))
    monkeypatch.setattr(sections, 'model_attention', forbidden('attention'))
    monkeypatch.setattr(benchmark, 'run_benchmark', forbidden('speed'))
    again = tool.main(argv)
    for key in ('accuracy', 'robustness', 'adversarial', 'collapse', 'speed'):
        assert json.loads(json.dumps(again[key])) == saved[key]

    # One model's speed missing: both are measured again, together.
    store = json.loads(open(osp.join(work, 'cells', 'speed.json')).read())
    del store['models']['dot']['cells']['speed']
    with open(osp.join(work, 'cells', 'speed.json'), 'w') as f:
        json.dump(store, f)
    measured = []

    def counting(models, options, on_step=None):
        measured.append([m.name for m in models])
        return run_benchmark(models, options, on_step)

    run_benchmark = benchmark.runner.run_benchmark
    monkeypatch.setattr(benchmark, 'run_benchmark', counting)
    again = tool.main(argv)
    assert measured == [names]
    assert again['collapse'] == saved['collapse']

    assert 'settings' in refused(capsys, tool.main,
                                 argv + ['--speed-size', '64'])
    assert "argument --baseline: 'x' is none" in refused(
        capsys, tool.main, argv + ['--baseline', 'x'])
    assert "argument --baseline: 'y' is none" in refused(
        capsys, tool.main, argv + ['--reference', 'y'])  # the old name
    assert 'two or more models, got 1' in refused(
        capsys, tool.main,
        demo_models[:2] + ['--work-dir', str(tmp_path / 'one')])


def test_an_old_attack_store_moves_to_its_own_folder(tmp_path):
    work = str(tmp_path)
    old = dict(models=dict(m=dict(cells={'clean': {}, 'pgd/linf/4/5': {}})))
    (tmp_path / 'cells' / 'areas' / 'm').mkdir(parents=True)
    (tmp_path / 'cells' / 'adversarial.json').write_text(json.dumps(old))
    for key in ('clean', 'pgd/linf/4/5', 'fog/1'):
        path = tmp_path / 'cells' / 'areas' / 'm' / f'{key}.npz'
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(key.encode())
    folder = osp.join(work, 'cells', 'adversarial')
    sections.move_old_attack_store(work, folder)
    assert json.loads(open(osp.join(folder, 'adversarial.json')).read()) == old
    assert not osp.exists(osp.join(work, 'cells', 'adversarial.json'))
    for key in ('clean', 'pgd/linf/4/5'):
        with open(osp.join(folder, 'areas', 'm', f'{key}.npz'), 'rb') as f:
            assert f.read() == key.encode()
        # the robustness grid keeps its own
        assert osp.isfile(osp.join(work, 'cells', 'areas', 'm', f'{key}.npz'))
    assert not osp.exists(osp.join(folder, 'areas', 'm', 'fog'))


def test_the_attack_section_takes_the_fewer_images(demo_models, tmp_path,
                                                   monkeypatch):
    options = sections.ReportOptions()
    assert sections.attack_images(options) is None
    options.attack_max_images = 32
    assert sections.attack_images(options) == 32
    options.max_images = 2
    assert sections.attack_images(options) == 2
    options.attack_max_images = None
    assert sections.attack_images(options) == 2
    options.attack_batch_size = 3
    seen = {}
    monkeypatch.setattr(sections, 'run_cells',
                        lambda *a, **kw: seen.update(kw))
    specs = [
        sections.ModelSpec(n, *demo_models[2 * i:2 * i + 2])
        for i, n in enumerate(('ell', 'dot'))
    ]
    sections.adversarial(specs, options, str(tmp_path))
    assert (seen['max_images'], seen['batch_size']) == (2, 3)
    tool = load_tool('analysis_tools/compare_models.py')
    assert tool.parse_args(demo_models).attack_max_images == 32
    assert tool.parse_args(demo_models +
                           ['--attack-max-images', '5']).attack_max_images == 5


def test_the_options_of_the_command_line(demo_models):
    """``ReportOptions.from_args``: the options named as the flags, the
    switches ``--no-adaptive`` and ``--no-audit`` turned round."""
    tool = load_tool('analysis_tools/compare_models.py')
    options = sections.ReportOptions.from_args(tool.parse_args(demo_models))
    assert (options.adaptive, options.audit, options.cfg_options) == \
        (True, True, {})
    args = tool.parse_args(demo_models + [
        '--no-adaptive', '--no-audit', '--seed', '3', '--cfg-options', 'a=1',
        '--names', 'e', 'd'
    ])
    options = sections.ReportOptions.from_args(args)
    assert (options.adaptive, options.audit, options.seed) == (False, False, 3)
    assert (options.cfg_options, options.arms) == ({
        'a': 1
    }, {
        'e': ['e'],
        'd': ['d']
    })
    assert options.launch == {} and options.baseline == 'd'
