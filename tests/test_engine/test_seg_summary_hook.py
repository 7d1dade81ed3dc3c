"""``engine/hooks/seg_summary_hook.py``: the end of a demo run, its summary
table and picture."""
import glob
import json
import os.path as osp
import re

import cv2
import numpy as np
import pytest
import torch
from builders import DEMO_ELLIPTICAL, tiny_config
from evidence_oracles import naive_blend
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from mmseg_elliptical.datasets.demo_shapes import (CLASSES, PALETTE,
                                                   render_scene)
from mmseg_elliptical.engine import SegSummaryHook
from mmseg_elliptical.engine.hooks.seg_summary_hook import GAP, _image

pytestmark = pytest.mark.usefixtures('single_thread')
SCALE, SCENES = 2, 3


@pytest.mark.parametrize(
    'kwargs',
    [dict(num_scenes=0),
     dict(num_scenes=2.0),
     dict(scale=0),
     dict(scale='2')])
def test_hook_arguments_are_checked(kwargs):
    with pytest.raises(ValueError, match='SegSummaryHook: '):
        SegSummaryHook(**kwargs)


@pytest.mark.slow  # trains end to end (mmengine's Runner)
def test_image_is_the_model_input_when_it_fits(tmp_path):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    rgb = np.random.default_rng(1).integers(0, 256, (6, 8, 3), np.uint8)
    path = str(tmp_path / 'x.png')
    cv2.imwrite(path, rgb[..., ::-1])
    sample = SegDataSample(
        pred_sem_seg=PixelData(data=torch.zeros(1, 6, 8, dtype=torch.long)))
    sample.set_metainfo(dict(img_path=path))
    other = 255 - rgb
    fits = torch.from_numpy(other[..., ::-1].copy()).permute(2, 0, 1)
    assert np.array_equal(_image(fits, sample), other)  # BGR input -> RGB
    assert np.array_equal(_image(None, sample), rgb)  # the file
    resized = torch.zeros(3, 12, 16, dtype=torch.uint8)
    assert np.array_equal(_image(resized, sample), rgb)


def picture_of_scenes(tmp_path, scale: int, with_labels: bool):
    """The hook's picture of two 32 x 32 demo scenes, drawn by a
    ``SegLocalVisualizer`` with the demo's classes, without a model: the
    prediction is stripes of every class."""
    from types import SimpleNamespace

    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    from mmseg.visualization import SegLocalVisualizer
    visualizer = SegLocalVisualizer(
        name=f'picture_{scale}_{with_labels}_{tmp_path.name}')
    visualizer.dataset_meta = dict(classes=CLASSES, palette=PALETTE)
    hook = SegSummaryHook(
        num_scenes=2, scale=scale, with_labels=with_labels, out_file='p.png')
    rng = np.random.default_rng(0)
    stripes = np.repeat(np.arange(32)[None] * len(CLASSES) // 32, 32, 0)
    for j in range(2):
        bgr, seg = render_scene(32, rng)
        path = str(tmp_path / f'{j}.png')
        cv2.imwrite(path, bgr)
        sample = SegDataSample(
            gt_sem_seg=PixelData(data=torch.from_numpy(seg)[None].long()),
            pred_sem_seg=PixelData(data=torch.from_numpy(stripes)[None]))
        sample.set_metainfo(dict(img_path=path))
        hook.after_val_iter(None, 0, None, [sample])
    hook.draw(SimpleNamespace(visualizer=visualizer, work_dir=str(tmp_path)))
    return cv2.imread(hook.picture_path)


@pytest.mark.parametrize('scale', [1, 3])
def test_picture_names_its_rows_and_classes(tmp_path, scale):
    bare = picture_of_scenes(tmp_path, scale, with_labels=False)
    side = 32 * scale
    assert bare.shape[:2] == (3 * side + 2 * GAP, 2 * side + GAP)
    picture = picture_of_scenes(tmp_path, scale, with_labels=True)
    height, width = bare.shape[:2]
    # The labels only add a margin on the left, a strip below and, when the
    # legend is wider than the scenes, white on the right.
    margin = np.nonzero((picture[:height] != 255).any(axis=(0, 2)))[0][-1] \
        + 1 - width
    assert margin > 0 and picture.shape[0] > height
    assert np.array_equal(picture[:height, margin:margin + width], bare)
    assert (picture[:height, margin + width:] == 255).all()
    assert (picture[height:, -2:] == 255).all()  # no name cut at the edge
    left = picture[:height, :margin].min(axis=(1, 2))
    for i in range(3):  # a name written in each row, none in the gaps
        band = left[i * (side + GAP):i * (side + GAP) + side]
        assert band.min() < 60
        assert (left[i * (side + GAP) + side:(i + 1) *
                     (side + GAP)] == 255).all()
    # The legend: a swatch of every class's colour (no text on it) and the
    # names in grey levels on white, with black among them.
    legend = picture[height:].reshape(-1, 3).astype(int)
    colours = [tuple(c[::-1]) for c in PALETTE if len(set(c)) > 1]  # BGR
    assert len(colours) == len(CLASSES) - 1  # all but black (background)
    found = [np.all(legend == c, axis=1) for c in colours]
    for colour, where in zip(colours, found):
        ys, xs = np.nonzero(where.reshape(picture[height:].shape[:2]))
        assert len(ys) >= 9, colour
        box = picture[height:][ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        assert (box == colour).all(), colour  # a solid swatch
    text = legend[~np.any(found, axis=0)]
    assert (text == text[:, :1]).all()  # grey levels: black text, white
    assert text.min() == 0


@pytest.fixture(scope='module')
def trained(demo_root, tmp_path_factory):
    """A tiny demo run (4 iterations) with the hook, and its runner."""
    init_default_scope('mmseg')
    work_dir = str(tmp_path_factory.mktemp('summary'))
    cfg = tiny_config(DEMO_ELLIPTICAL, demo_root, work_dir)
    hooks = [h for h in cfg.custom_hooks if h['type'] == 'SegSummaryHook']
    assert len(hooks) == 1  # the demo config ends with the summary
    hooks[0].update(num_scenes=SCENES, scale=SCALE, with_labels=False)
    # Own logger and visualizer: mmengine reuses instances by name, and an
    # earlier runner's would write this run's log and scalars elsewhere.
    cfg.experiment_name = 'summary_test'
    cfg.visualizer.name = 'summary_test'
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


def _log(runner):
    logs = glob.glob(osp.join(runner.work_dir, '*', '*.log'))
    assert len(logs) == 1
    with open(logs[0]) as f:
        return f.read()


def _last_val(runner):
    path = glob.glob(
        osp.join(runner.work_dir, '*', 'vis_data', 'scalars.json'))[0]
    with open(path) as f:
        records = [json.loads(line) for line in f]
    return [r for r in records if 'mIoU' in r][-1]


@pytest.mark.slow  # the trained fixture
def test_summary_prints_the_last_validation(trained):
    log = _log(trained)
    summary = log[log.rindex('Summary (validation, iteration 4'):]
    last = _last_val(trained)
    assert last['step'] == 4
    for name in CLASSES:
        value = last[f'IoU.{name}']
        shown = 'nan' if np.isnan(value) else f'{value:.2f}'
        assert re.search(rf'\| {name} +\| +{shown} +\|', summary), name
    for key in ('mIoU', 'aAcc', 'mAcc'):
        assert re.search(rf'\| {key} +\| +{last[key]:.2f} \|', summary)
    picture = osp.join(trained.work_dir, 'predictions.png')
    assert picture in summary


@pytest.mark.slow  # the trained fixture
def test_picture_shows_image_labels_and_predictions(trained):
    picture = cv2.imread(osp.join(trained.work_dir, 'predictions.png'))
    side = 64 * SCALE
    assert picture.shape == (3 * side + 2 * GAP,
                             SCENES * side + (SCENES - 1) * GAP, 3)
    dataset = trained.val_dataloader.dataset
    model = trained.model
    model.eval()
    alpha = trained.visualizer.alpha
    for j in range(SCENES):
        item = dataset[j]
        with torch.no_grad():
            pred = model.test_step(pseudo_collate([item]))[0]
        rgb = cv2.imread(item['data_samples'].img_path)[..., ::-1]
        gt = item['data_samples'].gt_sem_seg.data[0].numpy()
        pred = pred.pred_sem_seg.data[0].numpy()
        up = lambda a: np.repeat(np.repeat(a, SCALE, 0), SCALE, 1)  # noqa
        x = j * (side + GAP)
        blocks = [
            picture[i * (side + GAP):i * (side + GAP) + side, x:x + side, ::-1]
            for i in range(3)
        ]
        assert np.array_equal(blocks[0], up(rgb))
        for block, seg in ((blocks[1], gt), (blocks[2], pred)):
            expected = naive_blend(
                up(rgb).astype(np.float64), up(seg), PALETTE, alpha)
            assert np.abs(block.astype(int) - expected).max() <= 1
    assert (picture[side:side + GAP] == 255).all()  # white gaps


@pytest.mark.slow  # the trained fixture
def test_test_loop_draws_and_reports(trained):
    trained.test()
    log = _log(trained)
    assert 'Summary (test, iteration 4' in log
    assert osp.isfile(osp.join(trained.work_dir, 'predictions.png'))


@pytest.mark.slow  # the trained fixture
def test_summary_follows_the_last_validation(trained):
    hook = SegSummaryHook(
        num_scenes=1, scale=1, with_labels=False, out_file='last.png')
    dataset = trained.val_dataloader.dataset
    trained.model.eval()
    for j in (0, 1):
        batch = pseudo_collate([dataset[j]])
        hook.before_val_epoch(trained)
        with torch.no_grad():
            outputs = trained.model.val_step(batch)
        hook.after_val_iter(trained, 0, batch, outputs)
        hook.after_val_epoch(trained, {'mIoU': 10.0 + j, 'IoU.disc': 20.0 + j})
    hook.after_train(trained)
    log = _log(trained)
    summary = log[log.rindex('Summary (validation'):]
    assert re.search(r'\| mIoU +\| +11\.00 +\|', summary)
    assert re.search(r'\| disc +\| +21\.00 +\|', summary)
    picture = cv2.imread(osp.join(trained.work_dir, 'last.png'))
    image = cv2.imread(dataset[1]['data_samples'].img_path)
    assert np.array_equal(picture[:64], image)


@pytest.mark.parametrize('kwargs', [
    dict(expected=dict(mIoU=(85, 82))),
    dict(expected=dict(mIoU=84.1)),
    dict(expected=dict(mIoU=('a', 'b'))),
    dict(expected=dict(mIoU=(80, 82, 84))),
])
def test_expected_ranges_are_checked(kwargs):
    with pytest.raises(ValueError, match=r'SegSummaryHook: expected\[.mIoU'):
        SegSummaryHook(**kwargs)


@pytest.mark.parametrize('miou, where', [(84.13, 'inside'), (82.5, 'inside'),
                                         (71.3, 'below'), (90.0, 'above')])
def test_summary_puts_the_run_beside_its_expected_range(
        monkeypatch, miou, where):
    from types import SimpleNamespace

    from mmseg_elliptical.engine.hooks import seg_summary_hook
    printed = []
    monkeypatch.setattr(seg_summary_hook, 'print_log',
                        lambda text, logger: printed.append(text))
    hook = SegSummaryHook(
        expected=dict(mIoU=(82.5, 85.5), aAcc=(90, 99)),
        expected_note='5 seeds')
    hook._metrics = {'mIoU': miou, 'mAcc': 90.0}  # no aAcc: not printed
    runner = SimpleNamespace(
        iter=3000, visualizer=SimpleNamespace(dataset_meta={}))
    hook.report(runner, 'validation')
    lines = printed[0].splitlines()
    assert lines[-1] == (f'Expected mIoU: 82.50 to 85.50 (5 seeds); this '
                         f'run: {miou:.2f}, {where} the range.')
    assert not any('aAcc' in line for line in lines)
