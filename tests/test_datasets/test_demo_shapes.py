"""``datasets/demo_shapes.py``: the generated demo dataset: layout,
determinism, loading through mmseg."""
import argparse
import json
import os
import os.path as osp

import cv2
import numpy as np
import pytest
from builders import DEMO_DOT, TINY_GENERATE
from mmengine.config import Config, DictAction
from mmengine.registry import init_default_scope
from mmseg.registry import DATASETS

from mmseg_elliptical.datasets import DemoShapesDataset, generate_demo_shapes
from mmseg_elliptical.datasets.demo_shapes import (CLASSES, COLOURS, GAP,
                                                   RADIUS, VERSION,
                                                   render_scene)


def test_ade20k_layout(demo_root):
    for split, n in (('training', TINY_GENERATE['num_train']),
                     ('validation', TINY_GENERATE['num_val'])):
        imgs = sorted(os.listdir(osp.join(demo_root, 'images', split)))
        anns = sorted(os.listdir(osp.join(demo_root, 'annotations', split)))
        assert len(imgs) == len(anns) == n
        assert [i[:-4] for i in imgs] == [a[:-4] for a in anns]
        assert imgs[0].endswith('.jpg') and anns[0].endswith('.png')
    with open(osp.join(demo_root, 'meta.json')) as f:
        assert json.load(f) == dict(TINY_GENERATE, version=VERSION)


def test_deterministic(demo_root, tmp_path):
    other = str(tmp_path / 'again')
    generate_demo_shapes(other, **TINY_GENERATE)
    for sub in ('images/training', 'annotations/validation'):
        for name in os.listdir(osp.join(demo_root, sub)):
            a, b = (
                cv2.imread(osp.join(root, sub, name), cv2.IMREAD_UNCHANGED)
                for root in (demo_root, other))
            assert np.array_equal(a, b), name


def test_colour_does_not_separate_classes(tmp_path):
    root = str(tmp_path / 'many')
    generate_demo_shapes(root, num_train=40, num_val=1, img_size=64, seed=3)
    colours = {c: set() for c in range(1, len(CLASSES))}
    for name in os.listdir(osp.join(root, 'images', 'training')):
        img = cv2.imread(osp.join(root, 'images', 'training', name))
        seg = cv2.imread(
            osp.join(root, 'annotations', 'training', name[:-4] + '.png'), 0)
        for c in np.unique(seg)[1:]:  # object classes
            mean = img[seg == c].reshape(-1, 3).mean(0)
            # nearest palette colour of the region
            colours[int(c)].add(int(np.abs(COLOURS - mean).sum(1).argmin()))
    # every object class is painted in several colours: no colour-to-class
    # map exists
    assert all(len(v) >= 3 for v in colours.values()), colours
    assert set(range(len(CLASSES))) == set(
        np.unique(
            np.concatenate([
                cv2.imread(osp.join(root, 'annotations', 'training', n),
                           0).ravel()
                for n in os.listdir(osp.join(root, 'annotations', 'training'))
            ])))


def test_loads_through_mmseg_pipeline(demo_root):
    init_default_scope('mmseg')
    dataset = DATASETS.build(
        dict(
            type='DemoShapesDataset',
            data_root=demo_root,
            generate=TINY_GENERATE,
            data_prefix=dict(
                img_path='images/validation',
                seg_map_path='annotations/validation'),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations'),
                dict(type='PackSegInputs')
            ]))
    assert isinstance(dataset, DemoShapesDataset)
    assert len(dataset) == TINY_GENERATE['num_val']
    assert dataset.metainfo['classes'] == CLASSES
    sample = dataset[0]
    assert tuple(sample['inputs'].shape) == (3, 64, 64)
    seg = sample['data_samples'].gt_sem_seg.data
    assert seg.shape == (1, 64, 64) and int(seg.max()) < len(CLASSES)


def test_generated_on_first_use(tmp_path):
    root = str(tmp_path / 'fresh')
    dataset = DemoShapesDataset(
        data_root=root,
        generate=dict(num_train=3, num_val=2, img_size=32),
        data_prefix=dict(
            img_path='images/training', seg_map_path='annotations/training'))
    assert len(dataset) == 3
    assert not [p for p in os.listdir(tmp_path) if p.startswith('.demo')]


# Area of each class's shape of radius r (continuous geometry): disc, square
# of side 2r, triangle of base and height 2r, ring with a hole of radius r/2.
AREA = {
    1: lambda r: np.pi * r * r,
    2: lambda r: (2 * r + 1)**2,
    3: lambda r: (2 * r + 1)**2 / 2,
    4: lambda r: np.pi * (r * r - (r // 2)**2),
}


def _objects(seg):
    """(label, mask) of every 8-connected foreground region of a scene."""
    n, regions = cv2.connectedComponents(
        (seg > 0).astype(np.uint8), connectivity=8)
    return [(np.unique(seg[regions == i]), regions == i) for i in range(1, n)]


def test_objects_are_whole_shapes_apart_and_patch_sized():
    size = 64
    lo, hi = (round(f * size) for f in RADIUS)
    counts = {c: 0 for c in AREA}
    scenes = [
        render_scene(size, np.random.default_rng([9, i]))[1] for i in range(60)
    ]
    for seg in scenes:
        objects = _objects(seg)
        assert objects, 'a scene without objects'
        for labels, mask in objects:
            # one class per region: objects never touch, so never merge
            assert len(labels) == 1, labels
            label = int(labels[0])
            counts[label] += 1
            ys, xs = np.nonzero(mask)
            h, w = np.ptp(ys) + 1, np.ptp(xs) + 1
            assert h == w and 2 * lo + 1 <= w <= 2 * hi + 1, (label, h, w)
            area = AREA[label]((w - 1) // 2)
            assert abs(mask.sum() / area - 1) < 0.05, (label, mask.sum(), area)
            # at least GAP background pixels to any other object
            kernel = np.ones((2 * GAP + 1, 2 * GAP + 1), np.uint8)
            near = cv2.dilate(mask.astype(np.uint8), kernel) > 0
            assert not ((seg > 0) & near & ~mask).any()
    assert all(counts.values()), counts
    assert sum(len(_objects(s)) > 1 for s in scenes) > 0


def test_ring_has_a_hole():
    for i in range(40):
        seg = render_scene(64, np.random.default_rng([5, i]))[1]
        for labels, mask in _objects(seg):
            contours, hierarchy = cv2.findContours(
                mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
            holes = sum(h[3] >= 0 for h in hierarchy[0])
            assert holes == (1 if labels[0] == 4 else 0), labels


def test_stale_version_is_refused(tmp_path):
    root = tmp_path / 'old'
    root.mkdir()
    (root / 'meta.json').write_text(
        json.dumps(dict(TINY_GENERATE, version=VERSION - 1)))
    with pytest.raises(ValueError, match='use it as it is'):
        generate_demo_shapes(str(root), **TINY_GENERATE)


def test_mismatched_or_foreign_folder(demo_root, tmp_path):
    with pytest.raises(ValueError) as error:
        generate_demo_shapes(demo_root, num_train=99)
    # The fixes keep the data the demo checkpoints were measured on.
    text = str(error.value)
    assert 'delete' not in text and 'generate=None' in text, text
    assert 'another folder (data_root)' in text, text
    cfg = Config.fromfile(DEMO_DOT)
    options = text.split('--cfg-options ')[1].split(')')[0].split()
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    cfg.merge_from_dict(
        parser.parse_args(['--cfg-options', *options]).cfg_options)
    init_default_scope('mmseg')
    for loader in ('train', 'val', 'test'):
        dataset = cfg[f'{loader}_dataloader'].dataset
        assert dataset.generate is None
        dataset.data_root = demo_root
        assert len(DATASETS.build(dataset)) > 0  # what is there, as it is
    foreign = tmp_path / 'foreign'
    foreign.mkdir()
    (foreign / 'x.txt').write_text('mine')
    with pytest.raises(FileExistsError, match='not the demo dataset'):
        generate_demo_shapes(str(foreign))


@pytest.mark.parametrize('empty_folder', [False, True])
def test_a_process_losing_the_race_keeps_the_winners_data(
        tmp_path, monkeypatch, empty_folder):
    """Two processes generating at once (``make demo`` and ``make demo-dot``
    on a fresh clone): the one that finishes second keeps the first one's
    folder, whether the folder was missing or empty when it looked, and
    leaves no temporary folder behind."""
    from mmseg_elliptical.datasets import demo_shapes
    root = tmp_path / 'demo'
    if empty_folder:
        root.mkdir()
    real = demo_shapes.render_scene
    calls = []

    def the_other_process_wins(*args):
        if not calls:  # mid-generation, the other process finishes
            calls.append(1)
            monkeypatch.setattr(demo_shapes, 'render_scene', real)
            generate_demo_shapes(str(root), **TINY_GENERATE)
            monkeypatch.setattr(demo_shapes, 'render_scene',
                                the_other_process_wins)
        return real(*args)

    monkeypatch.setattr(demo_shapes, 'render_scene', the_other_process_wins)
    generate_demo_shapes(str(root), **TINY_GENERATE)
    assert calls
    with open(root / 'meta.json') as f:
        assert json.load(f) == dict(TINY_GENERATE, version=VERSION)
    assert os.listdir(tmp_path) == ['demo']
