"""The robustness grid end to end on tiny random checkpoints and demo
data."""
import json
import os
import os.path as osp

import pytest
from processes import load_tool
from saved_models import hand_miou

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import robustness as rb

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


def test_robustness_grid_and_resume(demo_models, tmp_path, monkeypatch):
    tool = load_tool('analysis_tools/robustness.py')
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
    md = '\n'.join(' '.join(x.split()) for x in md.splitlines())  # padding
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
        tool.main(
            demo_models +
            ['--corruptions', 'rain', '--work-dir',
             str(tmp_path / 'new')])
    assert not osp.exists(tmp_path / 'new')  # nothing written on bad input
    stat = os.stat(demo_models[1])
    os.utime(demo_models[1], (stat.st_atime, stat.st_mtime - 10))
    try:  # an overwritten checkpoint invalidates its results
        with pytest.raises(SystemExit, match="results of model 'ell'"):
            tool.main(argv)
    finally:
        os.utime(demo_models[1], (stat.st_atime, stat.st_mtime))
