"""Every Mask2Former, MaskFormer and KNet config at a tiny size: its Swin in
dot-product mode is mmseg's Swin, and the model trains a step.

The MaskFormer and Mask2Former configs need mmdet (skipped without it; see
test_mmdet_extra.py for what happens then); KNet's do not.
"""
import ast
import copy
import glob
import importlib.util
import os.path as osp

import pytest
import torch
from mmengine.config import Config, ConfigDict
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.models.backbones import SwinTransformer
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample

from mmseg_elliptical.models import (EllipticalMask2FormerHead,
                                     EllipticalMaskFormerHead,
                                     EllipticalSwinTransformer)
from mmseg_elliptical.utils import mmseg_config_path

pytestmark = pytest.mark.usefixtures('single_thread')

ROOT = osp.dirname(
    osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
FAMILIES = ('mask2former', 'maskformer', 'knet')
NEEDS_MMDET = ('mask2former', 'maskformer')
HAS_MMDET = importlib.util.find_spec('mmdet') is not None
CONFIGS = sorted(
    p for d in FAMILIES
    for p in glob.glob(osp.join(ROOT, 'configs', d, '*.py')))
SIZE, CLASSES, C = 64, 150, 16


def family(path: str) -> str:
    return osp.basename(osp.dirname(path))


def param(path: str):
    skip = family(path) in NEEDS_MMDET and not HAS_MMDET
    return pytest.param(
        path,
        id=osp.basename(path)[:-3],
        marks=pytest.mark.skipif(skip, reason='needs mmdet (the extra)'))


def mmseg_base(path: str) -> str:
    """The ``mmseg::`` config at the root of a shipped config's bases."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    base, = next(
        ast.literal_eval(node.value) for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == '_base_')
    if base.startswith('mmseg::'):
        return mmseg_config_path(base)
    return mmseg_base(osp.join(osp.dirname(path), base))


def tiny_swin(bb: ConfigDict) -> list:
    """Shrink a Swin config in place (depths and heads kept); returns the
    stage widths."""
    bb.embed_dims //= 4  # 8 channels per head in every Swin of these configs
    bb.pop('init_cfg', None)
    bb.pretrain_img_size = SIZE
    return [bb.embed_dims * 2**i for i in range(4)]


def tiny_model(path: str) -> ConfigDict:
    """The config's model at a tiny size, offline, BN for SyncBN."""
    model = copy.deepcopy(Config.fromfile(path).model)
    model.pretrained = None
    model.data_preprocessor.size = (SIZE, SIZE)
    widths = tiny_swin(model.backbone)
    head = model.decode_head
    if family(path) == 'knet':
        head.kernel_generate_head.update(in_channels=widths, channels=C)
        for stage in head.kernel_update_head:
            stage.update(
                in_channels=C,
                out_channels=C,
                feedforward_channels=2 * C,
                num_heads=2)
            stage.kernel_updator_cfg.update(
                in_channels=C, feat_channels=C, out_channels=C)
        model.auxiliary_head.update(in_channels=widths[2], channels=C)
    else:
        head.update(in_channels=widths, feat_channels=C, out_channels=C)
        head.num_queries = 8
        head.pixel_decoder.norm_cfg = dict(type='GN', num_groups=4)
        encoder = head.pixel_decoder.get('encoder')
        if encoder:  # Mask2Former's deformable pixel decoder
            encoder.num_layers = 1
            encoder.layer_cfg.self_attn_cfg.update(
                embed_dims=C, num_heads=2, num_points=2)
            encoder.layer_cfg.ffn_cfg.update(
                embed_dims=C, feedforward_channels=2 * C)
            head.pixel_decoder.positional_encoding.num_feats = C // 2
            head.train_cfg.num_points = 256
        head.positional_encoding.num_feats = C // 2
        layer = head.transformer_decoder.layer_cfg
        for attn in ('self_attn_cfg', 'cross_attn_cfg'):
            layer[attn].update(embed_dims=C, num_heads=2)
        layer.ffn_cfg.update(embed_dims=C, feedforward_channels=2 * C)
    return bn(model)


def bn(cfg):
    """SyncBN -> BN everywhere in a (nested) config."""
    if isinstance(cfg, dict):
        if cfg.get('type') == 'SyncBN':
            cfg['type'] = 'BN'
        for v in cfg.values():
            bn(v)
    elif isinstance(cfg, (list, tuple)):
        for v in cfg:
            bn(v)
    return cfg


def build(cfg, seed=0):
    init_default_scope('mmseg')
    torch.manual_seed(seed)
    module = MODELS.build(copy.deepcopy(cfg))
    module.init_weights()
    return module


def samples(n: int = 2):
    out = []
    for i in range(n):
        s = SegDataSample(
            metainfo=dict(
                img_shape=(SIZE, SIZE),
                pad_shape=(SIZE, SIZE),
                batch_input_shape=(SIZE, SIZE),
                ori_shape=(SIZE, SIZE)))
        s.gt_sem_seg = PixelData(
            data=torch.randint(
                0,
                CLASSES, (1, SIZE, SIZE),
                generator=torch.Generator().manual_seed(i)))
        out.append(s)
    return out


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
    mmseg_cfg = Config.fromfile(mmseg_base(path)).model.backbone
    assert ours_cfg.type == 'EllipticalSwinTransformer'
    assert mmseg_cfg.type == 'SwinTransformer'
    tiny_swin(ours_cfg), tiny_swin(mmseg_cfg)
    ref = build(mmseg_cfg)
    dot = build(dict(ours_cfg, elliptical_layers=[]))
    ell = build(ours_cfg)
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
    model = build(tiny_model(path)).train()
    assert type(model.backbone) is EllipticalSwinTransformer
    head = type(model.decode_head)
    name = osp.basename(path)
    if '_elliptical-mask_' in name:
        assert head in (EllipticalMask2FormerHead, EllipticalMaskFormerHead)
        assert model.decode_head.elliptical_layers
    else:
        assert not head.__name__.startswith('Elliptical')
    x = torch.randn(2, 3, SIZE, SIZE)
    losses = model.loss(x, samples())
    total = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    missing = [
        n for n, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    ]
    assert not missing, missing
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)
    model.eval()
    with torch.no_grad():
        seg = model.predict(x, samples())
    assert seg[0].pred_sem_seg.data.shape == (1, SIZE, SIZE)
