"""``evaluation/metrics/per_class_iou_metric.py``: PerClassIoUMetric against
counting by hand."""
import numpy as np
import pytest
import torch

from mmseg_elliptical.datasets.demo_shapes import CLASSES, PALETTE
from mmseg_elliptical.evaluation import PerClassIoUMetric


def test_per_class_iou_matches_counting():
    rng = np.random.default_rng(0)
    metric = PerClassIoUMetric(iou_metrics=['mIoU'])
    metric.dataset_meta = dict(classes=CLASSES, palette=PALETTE)
    pairs = []
    for _ in range(3):
        # class 4 is in neither labels nor predictions: its IoU is NaN
        gt = rng.integers(0, 4, (16, 16))
        noise = rng.integers(0, 4, (16, 16))
        pred = np.where(rng.random((16, 16)) < 0.6, gt, noise)
        gt[0, :3] = 255  # ignored
        pairs.append((pred, gt))
        metric.process({}, [
            dict(
                pred_sem_seg=dict(data=torch.from_numpy(pred)[None]),
                gt_sem_seg=dict(data=torch.from_numpy(gt)[None]))
        ])
    metrics = metric.evaluate(len(pairs))
    expected = []
    for c, name in enumerate(CLASSES):
        inter = union = 0
        for pred, gt in pairs:
            valid = gt != 255
            inter += ((pred == c) & (gt == c) & valid).sum()
            union += (((pred == c) | (gt == c)) & valid).sum()
        iou = 100 * inter / union if union else np.nan
        expected.append(iou)
        if np.isnan(iou):
            assert np.isnan(metrics[f'IoU.{name}']), name
        else:
            assert metrics[f'IoU.{name}'] == pytest.approx(iou, abs=0.006)
    assert metrics['mIoU'] == pytest.approx(np.nanmean(expected), abs=0.006)
    assert {'aAcc', 'mAcc'} <= set(metrics)
