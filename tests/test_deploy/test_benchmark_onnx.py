"""The benchmark's onnxruntime row: timed next to PyTorch eager in one run,
in inference only, its ratio the paired ratio of the two rows' rounds."""
import os.path as osp

import numpy as np
import pytest
import torch
from builders import ROOT

from mmseg_elliptical.benchmark import (BenchmarkOptions, derive_variants,
                                        run_benchmark)
from mmseg_elliptical.benchmark.reporting import markdown
from mmseg_elliptical.utils import load_config

pytest.importorskip('onnxruntime')

VIT_T = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')
TINY = {
    'model.backbone.num_layers': 2,
    'model.backbone.embed_dims': 24,
    'model.backbone.img_size': 32,
}


def test_onnxruntime_row_next_to_pytorch_eager():
    threads = torch.get_num_threads()
    cfg = load_config(VIT_T, TINY, no_pretrained=True)
    specs = derive_variants('vit', VIT_T, cfg.model.to_dict(),
                            ('elliptical', 'fused-dot'))
    options = BenchmarkOptions(
        sizes=[32],
        train_sizes=[32],
        rounds=3,
        memory='none',
        onnxruntime=True)
    try:
        report = run_benchmark(specs, options)
    finally:
        torch.set_num_threads(threads)
    rows = {(r['model'], r['mode']): r for r in report['results']}
    ort = rows[('elliptical (onnxruntime)', 'infer')]
    eager = rows[('elliptical', 'infer')]
    # inference only, for the elliptical model only
    assert ('elliptical (onnxruntime)', 'train') not in rows
    assert not any('fused-dot (' in name for name, _ in rows)
    assert ort['role'] == 'onnxruntime' and ort['median_ms'] > 0
    assert len(ort['round_ms']) == len(eager['round_ms']) == 3
    ratio, = report['runtime_ratios']
    expected = np.median(
        np.asarray(ort['round_ms']) / np.asarray(eager['round_ms']))
    assert ratio['time'] == pytest.approx(expected)
    assert ratio['pytorch_ms_per_image'] == pytest.approx(eager['median_ms'])
    assert '**onnxruntime** / PyTorch eager' in markdown(report)
