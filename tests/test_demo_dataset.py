"""The generated demo dataset: layout, determinism, loading through mmseg."""
import json
import os
import os.path as osp

import cv2
import numpy as np
import pytest
from mmengine.registry import init_default_scope
from mmseg.registry import DATASETS

from conftest import TINY_GENERATE
from mmseg_elliptical.datasets import DemoShapesDataset, generate_demo_shapes
from mmseg_elliptical.datasets.demo_shapes import CLASSES, COLOURS, VERSION


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
            a = cv2.imread(osp.join(demo_root, sub, name), cv2.IMREAD_UNCHANGED)
            b = cv2.imread(osp.join(other, sub, name), cv2.IMREAD_UNCHANGED)
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
        np.unique(np.concatenate([
            cv2.imread(osp.join(root, 'annotations', 'training', n), 0).ravel()
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


def test_mismatched_or_foreign_folder(demo_root, tmp_path):
    with pytest.raises(ValueError, match='delete the folder'):
        generate_demo_shapes(demo_root, num_train=99)
    foreign = tmp_path / 'foreign'
    foreign.mkdir()
    (foreign / 'x.txt').write_text('mine')
    with pytest.raises(FileExistsError, match='not the demo dataset'):
        generate_demo_shapes(str(foreign))
