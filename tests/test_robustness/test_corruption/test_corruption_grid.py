"""The robustness grid: cells end to end on tiny random checkpoints and demo
data, the summary and the paired test against independent computations,
resume after an interruption."""
import json
import os
import os.path as osp
import signal
import subprocess
import time

import numpy as np
import pytest
import torch
from builders import ROOT
from evidence_oracles import bootstrap_by_hand, robustness_by_hand
from mmengine.config import Config
from processes import launch_env, load_tool, refused, run_command
from saved_models import hand_miou

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.evaluation import PerClassIoUMetric
from mmseg_elliptical.robustness.corruption.cells import (GROUPS, PROTOCOLS,
                                                          group_of,
                                                          resolve_corruptions,
                                                          resolve_severities)
from mmseg_elliptical.robustness.corruption.pipeline import \
    corrupted_loader_cfg
from mmseg_elliptical.robustness.corruption.report import (
    paired_lines, write_robustness_report)
from mmseg_elliptical.robustness.corruption.verdicts import corruption_verdicts
from mmseg_elliptical.robustness.grid import areas as grid_areas
from mmseg_elliptical.robustness.grid import run as run_module
from mmseg_elliptical.robustness.grid.areas import ImageAreas
from mmseg_elliptical.robustness.grid.loop import CellHook, CorruptionGridLoop
from mmseg_elliptical.robustness.grid.run import with_image_areas
from mmseg_elliptical.robustness.grid.store import GridError, ResultStore
from mmseg_elliptical.robustness.statistics.bootstrap import paired_bootstrap
from mmseg_elliptical.robustness.statistics.summary import robustness_summary
from mmseg_elliptical.transforms import (COMMON_CORRUPTIONS, CORRUPTIONS,
                                         EXTRA_CORRUPTIONS)

pytest.importorskip('imagecorruptions')

pytestmark = pytest.mark.usefixtures('single_thread')

CELLS = ['clean', 'fog/1', 'fog/5', 'gaussian_noise/1', 'gaussian_noise/5']
TIMING = ('seconds', 'finished')
HEADER = '| model | P (mIoU) | mPC | rPC | mCE (against dot) | rmCE |'


def unpadded(text: str) -> str:
    """Markdown without prettytable's padding: one space between words."""
    return '\n'.join(' '.join(line.split()) for line in text.splitlines())


def scores(data: dict) -> str:
    """The cells of every model without their timing, as JSON text (an
    absent class's IoU is NaN, which equals no other NaN)."""
    return json.dumps(
        {
            name: {
                key: {
                    k: v
                    for k, v in cell.items() if k not in TIMING
                }
                for key, cell in model['cells'].items()
            }
            for name, model in data['models'].items()
        },
        sort_keys=True)


def test_pipeline_insertion():
    loader = dict(
        dataset=dict(
            type='X',
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations'),
                dict(type='PackSegInputs')
            ]))
    new = corrupted_loader_cfg(loader, 'fog', 2, seed=1, max_images=3)
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
    new = corrupted_loader_cfg(wrapped, 'fog', 1)
    assert all(len(d['pipeline']) == 4 for d in new['dataset']['datasets'])
    with pytest.raises(ValueError, match='No image loading transform'):
        corrupted_loader_cfg(
            dict(dataset=dict(pipeline=[dict(type='PackSegInputs')])), 'fog',
            1)
    with pytest.raises(ValueError, match='Unknown corruption'):
        corrupted_loader_cfg(loader, 'rain', 1)


def test_image_areas_evaluator():
    cfg = Config(
        dict(test_evaluator=dict(type='IoUMetric', iou_metrics=['mIoU'])))
    assert with_image_areas(cfg, per_class=False) is False
    assert cfg.test_evaluator == dict(
        type='PerClassIoUMetric', iou_metrics=['mIoU'], keep_image_areas=True)
    cfg = Config(dict(test_evaluator=dict(type='IoUMetric')))
    assert with_image_areas(cfg, per_class=True) is True
    cfg = Config(dict(test_evaluator=dict(type='PerClassIoUMetric')))
    assert with_image_areas(cfg, per_class=False) is True
    assert cfg.test_evaluator.keep_image_areas
    other = Config(dict(test_evaluator=dict(type='CityscapesMetric')))
    assert with_image_areas(other, per_class=False) is True
    assert other.test_evaluator == dict(type='CityscapesMetric')


def test_protocols_and_names():
    assert PROTOCOLS['ade20k-c'].corruptions == COMMON_CORRUPTIONS
    assert PROTOCOLS['ade20k-c'].severities == (1, 2, 3, 4, 5)
    assert PROTOCOLS['ade20k-c'].passes == 1 + 15 * 5
    paper = PROTOCOLS['paper']
    assert paper.corruptions == CORRUPTIONS and len(CORRUPTIONS) == 19
    assert paper.severities == (1, ) and paper.passes == 20
    assert paper.metrics == ('mIoU', 'mAcc', 'aAcc')
    assert PROTOCOLS['default'].passes == 96
    # The groups partition the 19 corruptions; each holds one held-out one.
    grouped = [c for g in GROUPS.values() for c in g]
    assert sorted(grouped) == sorted(CORRUPTIONS)
    for names in GROUPS.values():
        assert len(set(names) & set(EXTRA_CORRUPTIONS)) == 1
    assert group_of('zoom_blur') == 'blur'
    assert resolve_corruptions(['noise', 'gaussian_noise', 'fog']) == [
        'gaussian_noise', 'shot_noise', 'impulse_noise', 'speckle_noise', 'fog'
    ]
    assert resolve_corruptions(['common']) == list(COMMON_CORRUPTIONS)
    with pytest.raises(GridError, match="Unknown corruption 'rain'"):
        resolve_corruptions(['rain'])
    assert resolve_severities([5, 1, 5]) == [1, 5]
    with pytest.raises(GridError, match=r'severities \[0, 6\]'):
        resolve_severities([0, 1, 6])


def synthetic_cells(seed: int, models=('a', 'b', 'base')) -> dict:
    """Random cells of three models on four corruptions, two severities."""
    rng = np.random.default_rng(seed)
    cells = {}
    for name in models:
        cells[name] = {'clean': dict(mIoU=float(rng.uniform(60, 80)))}
        for c in ('gaussian_noise', 'shot_noise', 'fog', 'contrast'):
            for s in (1, 3):
                cells[name][f'{c}/{s}'] = dict(mIoU=float(rng.uniform(5, 60)))
    return cells


CORR = ['gaussian_noise', 'shot_noise', 'fog', 'contrast']


def test_summary_against_a_computation_by_hand():
    cells = synthetic_cells(0)
    got = robustness_summary(cells, CORR, [1, 3], 'mIoU', 'base')
    want = robustness_by_hand(cells, CORR, [1, 3], 'mIoU', 'base')
    for name in cells:
        for key in ('P', 'mPC', 'rPC', 'mCE', 'rmCE'):
            assert got[name][key] == pytest.approx(want[name][key]), key
        for key in ('CE', 'rCE'):
            assert got[name][key] == pytest.approx(want[name][key]), key
        assert sorted(got[name]['groups']) == ['digital', 'noise', 'weather']
        for group, values in want[name]['groups'].items():
            for key in ('mPC', 'mCE'):
                assert got[name]['groups'][group][key] == \
                    pytest.approx(values[key])
        assert got[name]['baseline'] == 'base'
    # The baseline's own errors are 1.
    assert got['base']['mCE'] == got['base']['rmCE'] == 1.0
    assert set(got['base']['CE'].values()) == {1.0}
    # Another baseline gives other errors; no baseline none.
    other = robustness_summary(cells, CORR, [1, 3], 'mIoU', 'a')
    assert other['a']['mCE'] == 1.0 and other['base']['mCE'] != 1.0
    alone = robustness_summary(cells, CORR, [1, 3], 'mIoU')
    assert alone['a']['mCE'] is None and alone['a']['CE']['fog'] is None
    assert any('No baseline' in n for n in alone['a']['notes'])
    with pytest.raises(ValueError, match="baseline 'x' is none"):
        robustness_summary(cells, CORR, [1, 3], 'mIoU', 'x')


def test_summary_never_divides_by_zero():
    cells = synthetic_cells(1)
    for s in (1, 3):  # the baseline: no error on fog, no drop on contrast
        cells['base'][f'fog/{s}']['mIoU'] = 100.0
        cells['base'][f'contrast/{s}']['mIoU'] = cells['base']['clean']['mIoU']
    got = robustness_summary(cells, CORR, [1, 3], 'mIoU', 'base')
    a = got['a']
    assert a['CE']['fog'] is None and a['rCE']['contrast'] is None
    assert a['CE']['contrast'] is not None and a['rCE']['fog'] is not None
    assert a['mCE'] is None and a['rmCE'] is None
    assert 'CE of fog is undefined: its denominator is 0.' in a['notes']
    assert 'rCE of contrast is undefined: its denominator is 0.' in \
        a['notes']
    assert a['groups']['noise']['mCE'] is not None
    assert a['groups']['weather']['mCE'] is None
    # A clean score of 0: rPC undefined, not inf.
    cells['a']['clean']['mIoU'] = 0.0
    a = robustness_summary(cells, CORR, [1, 3], 'mIoU', 'base')['a']
    assert a['rPC'] is None and 'rPC is undefined' in ' '.join(a['notes'])
    # A missing cell leaves the means that need it None.
    del cells['b']['fog/3']
    b = robustness_summary(cells, CORR, [1, 3], 'mIoU', 'base')['b']
    assert b['mPC'] is None and b['CE']['fog'] is None
    assert b['per_corruption']['contrast'] is not None
    assert b['grid']['fog'][1] is None


def random_areas(rng, images: int, classes: int, better: float = 0.0):
    """Per-image intersection and union areas of a plausible model."""
    union = rng.integers(0, 60, size=(images, classes))
    union[rng.random((images, classes)) < 0.3] = 0  # classes absent
    inter = np.floor(union *
                     np.clip(rng.random(
                         (images, classes)) + better, 0, 1)).astype(np.int64)
    return ImageAreas(inter, union)


def test_paired_bootstrap_against_a_computation_by_hand():
    rng = np.random.default_rng(0)
    a = [random_areas(rng, 7, 4) for _ in range(3)]
    b = [random_areas(rng, 7, 4) for _ in range(3)]
    got = paired_bootstrap(a, b, resamples=200, seed=3)
    want = bootstrap_by_hand(a, b, 200, 3)
    for key in ('difference', 'low', 'high'):
        assert got[key] == pytest.approx(want[key]), key
    assert got['zero_inside'] == (want['low'] <= 0 <= want['high'])
    assert (got['images'], got['cells'], got['resamples']) == (7, 3, 200)
    # The point estimate is the difference of mmseg's mIoU on all images.
    one = paired_bootstrap(a[:1], b[:1], 50, 0)
    assert one['difference'] == pytest.approx(
        bootstrap_by_hand(a[:1], b[:1], 1, 0)['difference'])
    # A fixed seed repeats; another seed draws other images.
    assert paired_bootstrap(a, b, 200, 3) == got
    assert paired_bootstrap(a, b, 200, 4)['low'] != got['low']


def test_paired_bootstrap_verdicts_and_errors():
    rng = np.random.default_rng(1)
    a = [random_areas(rng, 40, 5) for _ in range(2)]
    same = paired_bootstrap(a, a, 100)
    assert same['difference'] == same['low'] == same['high'] == 0
    assert same['zero_inside']
    # Better on every image: intersections closer to the unions.
    better = [
        ImageAreas(np.maximum(x.intersect, x.union - 1), x.union) for x in a
    ]
    got = paired_bootstrap(better, a, 300)
    assert 0 < got['low'] <= got['difference'] <= got['high']
    assert not got['zero_inside']
    one = ImageAreas(*(x[:1] for x in a[0]))
    with pytest.raises(ValueError, match='2 or more'):
        paired_bootstrap([one], [one])
    with pytest.raises(ValueError, match='same cells'):
        paired_bootstrap(a, a[:1])
    with pytest.raises(ValueError, match='one shape'):
        paired_bootstrap([a[0]], [ImageAreas(*(x[:-1] for x in a[0]))])


def test_paired_bootstrap_gives_no_verdict_below_30_images():
    """Below 30 images the interval is reported but called not reliable,
    also when it excludes 0; from 30 images on it says what it compares:
    these checkpoints on these images (one run per model)."""
    rng = np.random.default_rng(4)
    a = [random_areas(rng, 30, 5) for _ in range(2)]
    better = [
        ImageAreas(np.maximum(x.intersect, x.union - 1), x.union) for x in a
    ]
    full = paired_bootstrap(better, a, 300)
    # One run per model: the interval, no verdict across training seeds.
    assert not full['zero_inside'] and not full['reliable']
    assert full['verdict'] == (
        '0 outside: one run against one run: these checkpoints differ on '
        'these images; seed-to-seed variation is not in this interval')
    few = paired_bootstrap(
        *([ImageAreas(*(x[:29] for x in c)) for c in m] for m in (better, a)),
        300)
    assert few['images'] == 29 and not few['zero_inside']
    assert not few['reliable']
    assert few['verdict'].startswith('not reliable below 30 images')
    summary = dict(
        ell=dict(paired=dict(baseline='dot', clean=few, mPC=full, notes=[])))
    clean, mpc = paired_lines(summary)
    assert 'not reliable below 30 images' in clean
    assert 'these checkpoints differ' not in clean
    assert 'these checkpoints differ' in mpc and 'not reliable' not in mpc


def test_metric_keeps_the_areas_of_every_image():
    rng = np.random.default_rng(2)
    metric = PerClassIoUMetric(keep_image_areas=True)
    metric.dataset_meta = dict(classes=['a', 'b', 'c'])
    samples = []
    for _ in range(4):
        pred = torch.from_numpy(rng.integers(0, 3, (1, 6, 5)))
        gt = torch.from_numpy(rng.integers(0, 3, (1, 6, 5)))
        samples.append(
            dict(pred_sem_seg=dict(data=pred), gt_sem_seg=dict(data=gt)))
    metric.process({}, samples)
    result = metric.evaluate(4)
    inter, union = metric.image_areas
    assert inter.shape == union.shape == (4, 3)
    for i, s in enumerate(samples):
        p, g = s['pred_sem_seg']['data'][0], s['gt_sem_seg']['data'][0]
        for c in range(3):
            assert inter[i, c] == ((p == c) & (g == c)).sum()
            assert union[i, c] == ((p == c) | (g == c)).sum()
    assert grid_areas.miou(inter.sum(0), union.sum(0)) == pytest.approx(
        result['mIoU'], abs=0.005)
    plain = PerClassIoUMetric()
    plain.dataset_meta = metric.dataset_meta
    plain.process({}, samples)
    plain.evaluate(4)
    assert plain.image_areas is None


def test_report_of_a_stored_grid(tmp_path):
    """The summary, the means of the paper's protocol and the paired test
    from a store written by hand: the numbers and the files."""
    rng = np.random.default_rng(3)
    store = ResultStore(str(tmp_path / 'robustness.json'), {})
    corruptions, severities = ['fog', 'snow'], [1]
    for name in ('ell', 'dot'):
        store.add_model(name, __file__, __file__)
        for key in ['clean', 'fog/1', 'snow/1']:
            areas = random_areas(rng, 6, 3, better=0.3 * (name == 'ell'))
            miou = float(
                grid_areas.miou(areas.intersect.sum(0), areas.union.sum(0)))
            store.put(name, key, dict(mIoU=miou, mAcc=miou + 1, aAcc=miou + 2),
                      areas)
    text = unpadded(
        write_robustness_report(
            corruption_verdicts(store, ['ell', 'dot'], corruptions, severities,
                                'mIoU', 'dot', ('mIoU', 'mAcc', 'aAcc'), 100),
            str(tmp_path)))
    data = json.loads((tmp_path / 'robustness.json').read_text())
    summary = data['summary']
    assert sorted(data) == ['arms', 'models', 'settings', 'summary']
    cells = {n: data['models'][n]['cells'] for n in ('ell', 'dot')}
    for name in ('ell', 'dot'):
        want = robustness_by_hand(cells, corruptions, severities, 'mIoU',
                                  'dot')[name]
        for key in ('P', 'mPC', 'rPC', 'mCE', 'rmCE'):
            assert summary[name][key] == pytest.approx(want[key])
        for metric, offset in (('mIoU', 0), ('mAcc', 1), ('aAcc', 2)):
            means = summary[name]['means'][metric]
            assert means['clean'] == pytest.approx(want['P'] + offset)
            assert means['corrupted'] == pytest.approx(want['mPC'] + offset)
    assert summary['dot']['paired'] is None
    paired = summary['ell']['paired']
    want = bootstrap_by_hand([store.areas('ell', 'clean')],
                             [store.areas('dot', 'clean')], 100, 0)
    assert paired['clean']['difference'] == pytest.approx(want['difference'])
    assert paired['clean']['low'] == pytest.approx(want['low'])
    assert paired['mPC']['cells'] == 2 and paired['baseline'] == 'dot'
    assert HEADER in text
    assert '| metric | ell clean | ell corrupted mean |' in text
    assert f'- ell - dot, clean mIoU: {want["difference"]:+.2f}' in text
    header = (tmp_path / 'robustness_summary.csv').read_text().splitlines()[0]
    assert header.startswith('model,baseline,P,mPC,rPC,mCE,rmCE,')
    assert 'clean_difference,clean_low,clean_high' in header
    assert osp.getsize(tmp_path / 'robustness.png') > 0
    # Cells without their areas (an older result file): no paired test, a
    # note instead.
    os.remove(store.areas_path('dot', 'snow/1'))
    text = write_robustness_report(
        corruption_verdicts(store, ['ell', 'dot'], corruptions, severities,
                            'mIoU', 'dot'), str(tmp_path))
    paired = store.data['summary']['ell']['paired']
    assert paired['mPC'] is None and paired['clean'] is not None
    assert 'the per-image areas of snow/1 are missing' in text


#: The grid of the end-to-end tests: 2 images, 2 corruptions x 2
#: severities (3 images: the 2 processes of the distributed test get 2 and
#: 1, the sampler pads the second).
GRID = [
    '--corruptions', 'gaussian_noise', 'fog', '--severities', '1', '5',
    '--max-images', '3', '--resamples', '100'
]


@pytest.fixture(scope='module')
def grid_run(demo_models, tmp_path_factory):
    """The grid of both demo models in this process, and what mmengine's
    hooks saw while each cell ran: ``(work_dir, data, seen)``."""
    tool = load_tool('analysis_tools/robustness.py')
    work_dir = tmp_path_factory.mktemp('grid')
    seen = []
    after = CellHook.after_test_epoch

    def watch(self, runner, metrics=None):
        seen.append((runner.test_loop.cell, [
            t.__class__.__name__
            for t in runner.test_dataloader.dataset.pipeline.transforms
        ], len(runner.test_dataloader.dataset)))
        return after(self, runner, metrics)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CellHook, 'after_test_epoch', watch)
        data = tool.main(demo_models + GRID + ['--work-dir', str(work_dir)])
    return work_dir, json.loads(json.dumps(data)), seen


def test_robustness_grid_and_resume(demo_models, grid_run, monkeypatch,
                                    capsys):
    tool = load_tool('analysis_tools/robustness.py')
    tmp_path, data, seen = grid_run
    argv = demo_models + GRID + ['--work-dir', str(tmp_path)]
    for name in ('ell', 'dot'):
        assert sorted(data['models'][name]['cells']) == CELLS
        for key in CELLS:
            assert store_areas(tmp_path, name, key).shape == (3, 5)
    assert seen[0][0] == (None, None) and seen[0][2] == 3
    assert 'ImageCorruption' not in seen[0][1]
    assert seen[1][0] == ('gaussian_noise', 1)
    assert seen[1][1][:2] == ['LoadImageFromFile', 'ImageCorruption']
    # The clean cell against mIoU computed by hand from mmseg's predictions
    # on the same images.
    for i, name in enumerate(('ell', 'dot')):
        expected = hand_miou(demo_models[2 * i:2 * i + 2], 3)
        assert data['models'][name]['cells']['clean']['mIoU'] == \
            pytest.approx(expected, abs=0.01)
    # The summary against an independent computation from the cells; the
    # baseline is the last model.
    cells = {n: data['models'][n]['cells'] for n in ('ell', 'dot')}
    want = robustness_by_hand(cells, ['gaussian_noise', 'fog'], [1, 5], 'mIoU',
                              'dot')
    for name in ('ell', 'dot'):
        for key in ('P', 'mPC', 'rPC', 'mCE', 'rmCE'):
            assert data['summary'][name][key] == pytest.approx(
                want[name][key]), key
    assert data['summary']['ell']['paired']['clean']['images'] == 3
    for ext in ('json', 'md', 'csv', 'png'):
        assert osp.getsize(tmp_path / f'robustness.{ext}') > 0
    md = (tmp_path / 'robustness.md').read_text()
    md = unpadded(md)
    assert HEADER in md
    assert '| fog | 5 |' in md
    assert '- ell - dot, clean mIoU: ' in md
    saved = json.loads((tmp_path / 'robustness.json').read_text())

    # A finished grid is not recomputed: no runner is even built.
    def forbidden(*args, **kwargs):
        raise AssertionError('a finished cell was recomputed')

    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    again = tool.main(argv)
    assert scores(again) == scores(saved)
    assert again['summary']['ell']['mCE'] == saved['summary']['ell']['mCE']
    monkeypatch.undo()
    # --baseline changes the summary, not the cells.
    other = tool.main(argv + ['--baseline', 'ell'])
    assert other['summary']['ell']['mCE'] == 1.0
    assert other['summary']['dot']['paired']['baseline'] == 'ell'
    assert scores(other) == scores(saved)

    # After an interruption only the missing cell is computed.
    del saved['models']['dot']['cells']['fog/5']
    (tmp_path / 'robustness.json').write_text(json.dumps(saved))
    ran = []
    run = CorruptionGridLoop.run

    def counting(self):
        ran.append(list(self.cells))
        return run(self)

    monkeypatch.setattr(CorruptionGridLoop, 'run', counting)
    data = tool.main(argv)
    assert ran == [[('fog', 5)]]
    for cell in ('clean', 'gaussian_noise/1'):
        assert data['models']['ell']['cells'][cell] == \
            saved['models']['ell']['cells'][cell]

    assert 'settings' in refused(capsys, tool.main, argv + ['--seed', '1'])
    new = ['--work-dir', str(tmp_path / 'new')]
    assert "argument --corruptions: Unknown corruption 'rain'" in refused(
        capsys, tool.main, demo_models + ['--corruptions', 'rain'] + new)
    assert "argument --baseline: 'x' is none of the models" in refused(
        capsys, tool.main, argv[:4] + ['--baseline', 'x'] + new)
    assert '--protocol paper sets the corruptions' in refused(
        capsys, tool.main, argv + ['--protocol', 'paper'])
    assert not osp.exists(tmp_path / 'new')  # nothing written on bad input
    stat = os.stat(demo_models[1])
    os.utime(demo_models[1], (stat.st_atime, stat.st_mtime - 10))
    try:  # an overwritten checkpoint invalidates its results
        assert "results of model 'ell'" in refused(capsys, tool.main, argv)
    finally:
        os.utime(demo_models[1], (stat.st_atime, stat.st_mtime))


def store_areas(work_dir, name: str, key: str) -> np.ndarray:
    with np.load(osp.join(work_dir, 'areas', name, f'{key}.npz')) as f:
        assert f['intersect'].shape == f['union'].shape
        assert (f['intersect'] <= f['union']).all()
        return f['intersect']


def test_grid_interrupted_then_rerun_ends_with_the_same_cells(
        demo_models, grid_run, tmp_path, monkeypatch):
    tool = load_tool('analysis_tools/robustness.py')
    argv = demo_models + GRID + ['--work-dir', str(tmp_path)]
    record = run_module.record_cell
    done = []

    def interrupted(*args):
        if len(done) == 3:  # stopped while the 4th cell runs
            raise KeyboardInterrupt
        record(*args)
        done.append(args[5])

    monkeypatch.setattr(run_module, 'record_cell', interrupted)
    with pytest.raises(SystemExit) as stop:  # one line, not a traceback
        tool.main(argv)
    assert stop.value.code == 130
    monkeypatch.undo()
    partial = json.loads((tmp_path / 'robustness.json').read_text())
    assert sorted(partial['models']['ell']['cells']) == sorted(done)
    assert partial['models']['dot']['cells'] == {}
    data = tool.main(argv)
    assert scores(data) == scores(grid_run[1])
    for key in done:  # kept, not recomputed
        assert data['models']['ell']['cells'][key] == \
            partial['models']['ell']['cells'][key]


def test_launcher_options(monkeypatch):
    from mmseg_elliptical.engine import launch
    assert launch.start_launcher('none') == {}
    monkeypatch.delenv('RANK', raising=False)
    with pytest.raises(ConfigError, match='environment torchrun sets'):
        launch.start_launcher('pytorch', cuda=False)
    for name in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST'):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match='a task started by srun'):
        launch.start_launcher('slurm', cuda=False)
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setattr(launch.dist, 'is_initialized', lambda: True)
    assert launch.start_launcher(
        'pytorch', cuda=False) == dict(
            launcher='pytorch',
            model_wrapper_cfg=dict(
                type='MMDistributedDataParallel',
                device_ids=None,
                broadcast_buffers=False))
    assert launch.start_launcher(
        'pytorch', cuda=True) == dict(launcher='pytorch')


@pytest.mark.slow
def test_two_processes_resume_and_match_one_process(demo_models, grid_run,
                                                    tmp_path):
    """tools/dist_robustness.sh on 2 gloo processes, stopped (SIGTERM, as
    a scheduler stops a job) after its first cells and run again: every
    cell and every image's areas equal the single process's."""
    work = tmp_path / 'dist'
    command = [
        'bash',
        osp.join(ROOT, 'tools', 'dist_robustness.sh'), '2', *demo_models,
        *GRID, '--work-dir',
        str(work)
    ]
    env = launch_env()
    results = work / 'robustness.json'
    with open(tmp_path / 'log', 'w') as log:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True)
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if results.exists() and cells_in(results) >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # torchrun stops its workers
        proc.wait(60)
    before = json.loads(results.read_text())
    assert 2 <= cells_in(results) < 10, (tmp_path / 'log').read_text()[-3000:]
    run_command(command, env=launch_env())
    data = json.loads(results.read_text())
    assert scores(data) == scores(grid_run[1])
    for key, cell in before['models']['ell']['cells'].items():
        assert data['models']['ell']['cells'][key] == cell  # kept
    for name in ('ell', 'dot'):
        for key in CELLS:
            one, two = (
                np.load(osp.join(w, 'areas', name, f'{key}.npz'))
                for w in (grid_run[0], work))
            assert (one['intersect'] == two['intersect']).all()
            assert (one['union'] == two['union']).all()
    assert data['summary']['ell']['mCE'] == pytest.approx(
        grid_run[1]['summary']['ell']['mCE'])


def cells_in(path) -> int:
    """Finished cells in a robustness.json (written atomically)."""
    data = json.loads(path.read_text())
    return sum(len(m['cells']) for m in data['models'].values())
