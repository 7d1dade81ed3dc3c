"""The robustness grid end to end on tiny random checkpoints and demo data,
and the model naming and report writing the analysis tools share."""
import json
import os
import os.path as osp
import pytest

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.utils.config import model_names, model_specs
from mmseg_elliptical.utils.report import markdown_table, pyplot, write_report
from .builders import hand_miou, load_tool

pytest.importorskip('imagecorruptions')

pytestmark = pytest.mark.usefixtures('single_thread')


def test_pipeline_insertion():
    loader = dict(
        dataset=dict(
            type='X',
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations'),
                dict(type='PackSegInputs')
            ]))
    new = rb.corrupted_loader_cfg(loader, 'fog', 2, seed=1, max_images=3)
    types = [t['type'] for t in new['dataset']['pipeline']]
    assert types == [
        'LoadImageFromFile', 'ImageCorruption', 'LoadAnnotations',
        'PackSegInputs'
    ]
    assert new['dataset']['pipeline'][1]['severity'] == 2
    assert new['dataset']['indices'] == 3
    assert len(loader['dataset']['pipeline']) == 3  # input untouched
    wrapped = dict(
        dataset=dict(
            type='ConcatDataset',
            datasets=[loader['dataset'], loader['dataset']]))
    new = rb.corrupted_loader_cfg(wrapped, 'fog', 1)
    assert all(len(d['pipeline']) == 4 for d in new['dataset']['datasets'])
    with pytest.raises(ValueError, match='No image loading transform'):
        rb.corrupted_loader_cfg(
            dict(dataset=dict(pipeline=[dict(type='PackSegInputs')])), 'fog',
            1)
    with pytest.raises(ValueError, match='Unknown corruption'):
        rb.corrupted_loader_cfg(loader, 'rain', 1)


def test_per_class_iou_evaluator():
    from mmengine.config import Config
    cfg = Config(
        dict(test_evaluator=dict(type='IoUMetric', iou_metrics=['mIoU'])))
    rb.with_per_class_iou(cfg)
    assert cfg.test_evaluator == dict(
        type='PerClassIoUMetric', iou_metrics=['mIoU'])
    other = Config(dict(test_evaluator=dict(type='CityscapesMetric')))
    rb.with_per_class_iou(other)
    assert other.test_evaluator.type == 'CityscapesMetric'


def test_model_specs_errors(demo_models):
    with pytest.raises(ValueError, match='pairs'):
        model_specs(demo_models[:3])
    with pytest.raises(ValueError, match='config first'):
        model_specs(demo_models[1::-1])
    with pytest.raises(ValueError, match='does not exist'):
        model_specs([demo_models[0], 'missing.pth'])
    specs = model_specs(demo_models)
    assert [s.name for s in specs] == ['ell', 'dot']


def test_model_names():
    assert model_names(['a/x.py', 'b/y.py']) == ['x', 'y']
    assert model_names(['a/x.py', 'b/x.py']) == ['x#0', 'x#1']
    assert model_names(['a/x.py'], ['ell']) == ['ell']
    with pytest.raises(ValueError, match='2 names for 1'):
        model_names(['a/x.py'], ['p', 'q'])
    with pytest.raises(ValueError, match='must differ'):
        model_names(['a/x.py', 'b/y.py'], ['p', 'p'])


def test_report_writer(tmp_path):
    table = markdown_table(
        ['model', 'n', 'score'],
        [['a', 3, 1.23456], ['b', None, float('nan')]],
        spec='.2f',
        left=1)
    assert table == ('| model | n | score |\n|---|---:|---:|\n'
                     '| a | 3 | 1.23 |\n| b | - | - |\n')
    fig, ax = pyplot().subplots()
    ax.plot([0, 1])
    files = write_report(
        str(tmp_path / 'out'),
        'r',
        data={'x': [1, 2]},
        markdown=table,
        table=(['a', 'b'], [[1, None]]),
        figure=fig)
    assert [osp.basename(f)
            for f in files] == ['r.json', 'r.md', 'r.csv', 'r.png']
    assert json.loads((tmp_path / 'out' / 'r.json').read_text()) == \
        {'x': [1, 2]}
    assert (tmp_path / 'out' / 'r.md').read_text() == table
    assert (tmp_path / 'out' / 'r.csv').read_text().splitlines() == \
        ['a,b', '1,']
    assert (tmp_path / 'out' / 'r.png').read_bytes()[:4] == b'\x89PNG'
    assert write_report(str(tmp_path / 'out'), 's') == []


def test_robustness_grid_and_resume(demo_models, tmp_path, monkeypatch):
    tool = load_tool('robustness')
    argv = demo_models + [
        '--corruptions', 'gaussian_noise', 'fog', '--severities', '1', '5',
        '--work-dir',
        str(tmp_path), '--max-images', '2'
    ]
    data = tool.main(argv)
    for name in ('ell', 'dot'):
        cells = data['models'][name]['cells']
        assert sorted(cells) == [
            'clean', 'fog/1', 'fog/5', 'gaussian_noise/1', 'gaussian_noise/5'
        ]
    # The clean cell against mIoU computed by hand from mmseg's predictions
    # on the same two images.
    for i, name in enumerate(('ell', 'dot')):
        expected = hand_miou(demo_models[2 * i:2 * i + 2], 2)
        assert data['models'][name]['cells']['clean']['mIoU'] == \
            pytest.approx(expected, abs=0.01)
    for ext in ('json', 'md', 'csv', 'png'):
        assert osp.getsize(tmp_path / f'robustness.{ext}') > 0
    md = (tmp_path / 'robustness.md').read_text()
    assert '| model | clean mIoU | mean corrupted mIoU |' in md
    assert '| fog | 5 |' in md
    saved = json.loads((tmp_path / 'robustness.json').read_text())

    # A finished grid is not recomputed: no model is even built.
    class Forbidden:

        def __init__(self, *args, **kwargs):
            raise AssertionError('a finished cell was recomputed')

    monkeypatch.setattr(rb, 'CellEvaluator', Forbidden)
    assert tool.main(argv) == saved
    monkeypatch.undo()

    # After an interruption only the missing cell is computed.
    del saved['models']['dot']['cells']['fog/5']
    (tmp_path / 'robustness.json').write_text(json.dumps(saved))
    calls = []
    evaluate = rb.CellEvaluator.evaluate

    def counting(self, loader_cfg):
        calls.append(loader_cfg['dataset']['pipeline'][1])
        return evaluate(self, loader_cfg)

    monkeypatch.setattr(rb.CellEvaluator, 'evaluate', counting)
    data = tool.main(argv)
    assert [(c['corruption'], c['severity']) for c in calls] == [('fog', 5)]
    for cell in ('clean', 'gaussian_noise/1'):
        assert data['models']['ell']['cells'][cell] == \
            saved['models']['ell']['cells'][cell]

    with pytest.raises(SystemExit, match='settings'):
        tool.main(argv + ['--seed', '1'])
    with pytest.raises(SystemExit, match='Unknown corruption'):
        tool.main(demo_models + ['--corruptions', 'rain'])
    stat = os.stat(demo_models[1])
    os.utime(demo_models[1], (stat.st_atime, stat.st_mtime - 10))
    try:  # an overwritten checkpoint invalidates its results
        with pytest.raises(SystemExit, match="results of model 'ell'"):
            tool.main(argv)
    finally:
        os.utime(demo_models[1], (stat.st_atime, stat.st_mtime))
