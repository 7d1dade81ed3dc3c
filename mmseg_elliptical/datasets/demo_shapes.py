"""A small synthetic dataset in ADE20K layout, generated on first use
(docs/demo.md, "The scenes")::

    data_root/images/{training,validation}/demo_00000.jpg
    data_root/annotations/{training,validation}/demo_00000.png
"""
import json
import os
import os.path as osp
import shutil
import tempfile
from typing import Dict

import cv2
import numpy as np
from mmengine.logging import print_log
from mmseg.datasets import BaseSegDataset
from mmseg.registry import DATASETS

CLASSES = ('background', 'disc', 'square', 'triangle', 'ring')
PALETTE = [[0, 0, 0], [230, 25, 75], [60, 180, 75], [0, 130, 200],
           [255, 225, 25]]
# Colours the shapes are painted with (BGR), shared by every object class.
COLOURS = np.array([[200, 60, 60], [60, 200, 60], [60, 60, 200],
                    [200, 200, 60], [200, 60, 200], [60, 200, 200]],
                   dtype=np.int16)
SPLITS = {'training': 'num_train', 'validation': 'num_val'}
# Bumped whenever the scenes change, so stale folders are detected.
VERSION = 5
GREY_LEVELS = (30, 90)  # range of the background's grey level
NOISE = 10  # std of the pixel noise
OBJECTS = (1, 3)  # fewest and most objects in a scene
RADIUS = (0.22, 0.34)  # object radius range, as a fraction of the image side
GAP = 2  # fewest background pixels between two objects
TRIES = 20  # placements tried per object before it is left out


def _shape_mask(label: int, size: int, cx: int, cy: int, r: int) -> np.ndarray:
    """Binary mask of one shape of "radius" ``r`` centred at (cx, cy)."""
    mask = np.zeros((size, size), np.uint8)
    if label == 1:  # disc
        cv2.circle(mask, (cx, cy), r, 1, -1)
    elif label == 2:  # square, axis-aligned, side 2r
        cv2.rectangle(mask, (cx - r, cy - r), (cx + r, cy + r), 1, -1)
    elif label == 3:  # triangle pointing up, base and height 2r
        pts = np.array([[cx, cy - r], [cx - r, cy + r], [cx + r, cy + r]])
        cv2.fillPoly(mask, [pts.astype(np.int32)], 1)
    else:  # ring: a disc with a hole of half its radius
        cv2.circle(mask, (cx, cy), r, 1, -1)
        cv2.circle(mask, (cx, cy), r // 2, 0, -1)
    return mask


def render_scene(size: int, rng: np.random.Generator):
    """Render one ``(image BGR uint8, label uint8)`` pair; objects keep
    ``GAP`` pixels apart or are left out after ``TRIES`` attempts."""
    img = np.empty((size, size, 3), np.int16)
    img[:] = rng.integers(*GREY_LEVELS)
    seg = np.zeros((size, size), np.uint8)
    lo, hi = (max(2, round(f * size)) for f in RADIUS)
    kernel = np.ones((2 * GAP + 1, 2 * GAP + 1), np.uint8)
    for _ in range(int(rng.integers(OBJECTS[0], OBJECTS[1] + 1))):
        label = int(rng.integers(1, len(CLASSES)))
        r = int(rng.integers(lo, hi + 1))
        colour = [int(c) for c in COLOURS[rng.integers(len(COLOURS))]]
        taken = cv2.dilate((seg > 0).astype(np.uint8), kernel) > 0
        for _ in range(TRIES):
            cx, cy = (int(c) for c in rng.integers(r, size - r, 2))
            mask = _shape_mask(label, size, cx, cy, r) > 0
            if not (mask & taken).any():
                img[mask] = colour
                seg[mask] = label
                break
    img += rng.normal(0, NOISE, img.shape).astype(np.int16)
    return np.clip(img, 0, 255).astype(np.uint8), seg


def generate_demo_shapes(data_root: str,
                         num_train: int = 256,
                         num_val: int = 64,
                         img_size: int = 64,
                         seed: int = 0) -> None:
    """Write the dataset under ``data_root`` unless it is already there
    (through a temporary folder, so DDP ranks never see half of it).

    Args:
        data_root (str): Destination folder.
        num_train (int): Training images.
        num_val (int): Validation images.
        img_size (int): Side of the square images in pixels.
        seed (int): Seed of the scenes.
    """
    meta = dict(
        num_train=num_train,
        num_val=num_val,
        img_size=img_size,
        seed=seed,
        version=VERSION)
    meta_file = osp.join(data_root, 'meta.json')
    if osp.exists(meta_file):
        with open(meta_file) as f:
            found = json.load(f)
        if found != meta:
            raise ValueError(
                f'{data_root} holds demo data generated with {found}, not '
                f'{meta}. Keep it (results and checkpoints were measured on '
                'it) and either use it as it is (generate=None in the '
                'dataset, e.g. --cfg-options '
                'train_dataloader.dataset.generate=None '
                'val_dataloader.dataset.generate=None '
                'test_dataloader.dataset.generate=None), or generate the new '
                'data in another folder (data_root).')
        return
    if osp.exists(data_root) and os.listdir(data_root):
        raise FileExistsError(
            f'{data_root} exists but holds no demo meta.json: it is not the '
            'demo dataset. Point data_root at an empty or new folder.')
    relative = '' if osp.isabs(data_root) else ', relative to the working ' \
        'directory'
    print_log(
        f'Generating the demo scenes in {osp.abspath(data_root)} (data_root '
        f'{data_root}{relative}).',
        logger='current')
    parent = osp.dirname(osp.abspath(data_root))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix='.demo_shapes-', dir=parent)
    try:
        for split, key in SPLITS.items():
            os.makedirs(osp.join(tmp, 'images', split))
            os.makedirs(osp.join(tmp, 'annotations', split))
            for i in range(meta[key]):
                rng = np.random.default_rng([seed, len(split), i])
                img, seg = render_scene(img_size, rng)
                name = f'demo_{i:05d}'
                cv2.imwrite(
                    osp.join(tmp, 'images', split, name + '.jpg'), img,
                    [cv2.IMWRITE_JPEG_QUALITY, 95])
                cv2.imwrite(
                    osp.join(tmp, 'annotations', split, name + '.png'), seg)
        with open(osp.join(tmp, 'meta.json'), 'w') as f:
            json.dump(meta, f)
        try:  # another process may have won the race since the check
            if osp.isdir(data_root):
                os.rmdir(data_root)  # empty unless the winner's
            os.rename(tmp, data_root)
        except FileNotFoundError:  # another process removed the empty one
            os.rename(tmp, data_root)
        except OSError:  # the winner's folder is there
            if not osp.exists(meta_file):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@DATASETS.register_module()
class DemoShapesDataset(BaseSegDataset):
    """Synthetic shapes in ADE20K layout: background, disc, square,
    triangle, ring (no zero-label reduction).

    Args:
        generate (dict, optional): Keyword arguments of
            :func:`generate_demo_shapes`; None to never generate.
        **kwargs: Arguments of ``mmseg.datasets.BaseSegDataset``.
    """
    METAINFO = dict(classes=CLASSES, palette=PALETTE)

    def __init__(self, generate: Dict = dict(), **kwargs) -> None:
        self._generate = generate
        super().__init__(
            img_suffix='.jpg',
            seg_map_suffix='.png',
            reduce_zero_label=False,
            **kwargs)

    def load_data_list(self):
        """Generate the files if needed, then list them as mmseg does."""
        if self._generate is not None:
            generate_demo_shapes(self.data_root, **self._generate)
        return super().load_data_list()
