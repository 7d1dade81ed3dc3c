"""Every Mask2Former, MaskFormer and KNet config at a tiny size: its Swin in
dot-product mode is mmseg's Swin, and the model trains a step.

The MaskFormer and Mask2Former configs need mmdet (skipped without it; see
test_mmdet_extra.py for what happens then); KNet's do not.
"""
import os.path as osp

import pytest
import torch
from builders import HAS_MMDET, MMDET_CONFIG_DIRS, build_module, seg_samples
from checks import check_loss_trains_every_parameter
from mmengine.config import Config, ConfigDict
from mmseg.models.backbones import SwinTransformer
from shipped_configs import (config_paths, mmseg_base, tiny_mask_model,
                             tiny_swin)

from mmseg_elliptical.models import (EllipticalMask2FormerHead,
                                     EllipticalMaskFormerHead,
                                     EllipticalSwinTransformer)
from mmseg_elliptical.utils import load_config

pytestmark = pytest.mark.usefixtures('single_thread')

CONFIGS = config_paths(*MMDET_CONFIG_DIRS, 'knet')
SIZE, CLASSES, C = 64, 150, 16


def family(path: str) -> str:
    return osp.basename(osp.dirname(path))


def param(path: str):
    skip = family(path) in MMDET_CONFIG_DIRS and not HAS_MMDET
    return pytest.param(
        path,
        id=osp.basename(path)[:-3],
        marks=pytest.mark.skipif(skip, reason='needs mmdet (the extra)'))


def tiny_model(path: str) -> ConfigDict:
    return tiny_mask_model(path, SIZE, C)


def samples():
    return seg_samples(2, SIZE, SIZE, CLASSES)


def test_every_family_config_is_here():
    names = [osp.basename(p) for p in CONFIGS]
    assert len(names) == 16
    assert sum(n.startswith('mask2former_') for n in names) == 10
    assert sum(n.startswith('maskformer_') for n in names) == 4
    assert sum(n.startswith('knet-') for n in names) == 2


@pytest.mark.parametrize(
    'path', [param(p) for p in CONFIGS if '_elliptical-mask_' not in p])
def test_swin_in_dot_product_mode_is_mmsegs(path):
    """(The configs with the elliptical head inherit these backbones.) The
    config's backbone with ``elliptical_layers=[]`` and mmseg's
    config's ``SwinTransformer``, built from one seed: the same weights and
    the same features; the default elliptical backbone differs."""
    ours_cfg = Config.fromfile(path).model.backbone
    mmseg_cfg = load_config(mmseg_base(path)).model.backbone
    assert ours_cfg.type == 'EllipticalSwinTransformer'
    assert mmseg_cfg.type == 'SwinTransformer'
    tiny_swin(ours_cfg, SIZE), tiny_swin(mmseg_cfg, SIZE)
    ref = build_module(mmseg_cfg)
    dot = build_module(dict(ours_cfg, elliptical_layers=[]))
    ell = build_module(ours_cfg)
    for model in (ref, dot, ell):
        model.eval()  # mmseg's Swin.train() returns None
    assert type(ref) is SwinTransformer
    assert type(dot) is type(ell) is EllipticalSwinTransformer
    depths = ours_cfg.depths
    assert len(ell.elliptical_layers) == sum(depths) - len(depths)
    a, b = ref.state_dict(), dot.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        expected = ref(x)
        for got, e in zip(dot(x), expected, strict=True):
            torch.testing.assert_close(got, e, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(ell(x)[-1], expected[-1], atol=1e-4)


@pytest.mark.parametrize('path', [param(p) for p in CONFIGS])
def test_config_trains_a_step(path):
    model = build_module(tiny_model(path)).train()
    assert type(model.backbone) is EllipticalSwinTransformer
    head = type(model.decode_head)
    name = osp.basename(path)
    if '_elliptical-mask_' in name:
        assert head in (EllipticalMask2FormerHead, EllipticalMaskFormerHead)
        assert model.decode_head.elliptical_layers
    else:
        assert not head.__name__.startswith('Elliptical')
    x = torch.randn(2, 3, SIZE, SIZE)
    check_loss_trains_every_parameter(model, model.loss(x, samples()))
    model.eval()
    with torch.no_grad():
        seg = model.predict(x, samples())
    assert seg[0].pred_sem_seg.data.shape == (1, SIZE, SIZE)
