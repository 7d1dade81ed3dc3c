"""Every family config at a tiny size: dot-product mode is mmseg's model,
and the elliptical model trains (a loss step through the whole
segmentor)."""
import copy
import os.path as osp

import pytest
import torch
from builders import (ROOT, config_paths, mmseg_base, mmseg_names, seg_samples,
                      sync_bn_to_bn)
from checks import (check_interchange, check_loss_trains_every_parameter,
                    tiny_train_step)
from mmengine.config import Config, ConfigDict
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope, init_default_scope
from mmseg.registry import MODELS

from mmseg_elliptical.models import (EllipticalBEiT, EllipticalMAE,
                                     EllipticalSwinTransformer)
from mmseg_elliptical.utils import load_config

pytestmark = pytest.mark.usefixtures('single_thread')

FAMILY_DIRS = ('setr', 'vit', 'dpt', 'segformer', 'twins')
CONFIGS = config_paths(*FAMILY_DIRS)
SIZE = 64
MMSEG_NAMES = mmseg_names()


def _map_channels(cfg, mapping):
    """Replace channel counts of the old backbone by the tiny one's."""
    if isinstance(cfg, (list, tuple)):
        return type(cfg)(_map_channels(c, mapping) for c in cfg)
    if not isinstance(cfg, dict):
        return cfg
    for key, value in cfg.items():
        if key in ('in_channels', 'out_channels', 'embed_dims', 'channels'):
            if isinstance(value, int):
                cfg[key] = mapping.get(value, value)
            elif isinstance(value, (list, tuple)):
                cfg[key] = type(value)(mapping.get(v, v) for v in value)
        else:
            cfg[key] = _map_channels(value, mapping)
    return cfg


def tiny(model_cfg: ConfigDict) -> ConfigDict:
    """A family's model config shrunk to a few tiny layers, offline."""
    cfg = copy.deepcopy(model_cfg)
    cfg.pretrained = None
    cfg.data_preprocessor.size = (SIZE, SIZE)
    bb = cfg.backbone
    bb.pop('init_cfg', None)
    kind = MMSEG_NAMES.get(bb.type, bb.type)
    if kind == 'VisionTransformer':
        mapping = {bb.get('embed_dims', 768): 16}
        k = len(bb.out_indices) if isinstance(bb.out_indices,
                                              (list, tuple)) else 1
        bb.update(
            embed_dims=16,
            num_heads=2,
            num_layers=4,
            mlp_ratio=2,
            img_size=(SIZE, SIZE),
            out_indices=tuple(range(4 - k, 4)) if k > 1 else 3)
    elif kind == 'MixVisionTransformer':
        old = [bb.embed_dims * h for h in bb.num_heads]
        bb.update(
            embed_dims=8, num_heads=[1, 2, 2, 4], num_layers=[2, 2, 2, 2])
        mapping = dict(zip(old, [8, 16, 16, 32]))
    elif kind == 'PCPVT':
        mapping = dict(zip(bb.embed_dims, [8, 16, 32, 64]))
        bb.update(
            embed_dims=[8, 16, 32, 64],
            num_heads=[1, 2, 4, 8],
            depths=[2, 2, 2, 2])
    else:
        raise AssertionError(f'no shrink rule for {kind}')
    for part in ('neck', 'decode_head', 'auxiliary_head'):
        if cfg.get(part):
            cfg[part] = sync_bn_to_bn(_map_channels(cfg[part], mapping))
    return cfg


def build(model_cfg: ConfigDict, **backbone) -> torch.nn.Module:
    init_default_scope('mmseg')
    cfg = copy.deepcopy(model_cfg)
    cfg.backbone.update(backbone)
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    model.init_weights()
    return model


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_family_config(path):
    ours_cfg = tiny(Config.fromfile(path).model)
    mmseg_cfg = tiny(load_config(mmseg_base(path)).model)
    mmseg_model = build(mmseg_cfg).eval()
    dot = build(ours_cfg, elliptical_layers=[]).eval()
    # Same seed, same weights: the conversion consumes no RNG, adds nothing.
    a, b = mmseg_model.state_dict(), dot.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        torch.testing.assert_close(
            dot(x, mode='tensor'),
            mmseg_model(x, mode='tensor'),
            atol=1e-5,
            rtol=1e-4)
    # The elliptical model: same weights load strictly both ways, its
    # output differs, and it trains (finite loss, every gradient there).
    model = build(ours_cfg)
    assert model.backbone.elliptical_layers
    check_interchange(mmseg_model, model)
    model.eval()
    with torch.no_grad():
        assert not torch.allclose(
            model(x, mode='tensor'), dot(x, mode='tensor'), atol=1e-5)
    model.train()
    check_loss_trains_every_parameter(
        model, model.loss(x, seg_samples(2, SIZE, SIZE, 150)))


SWIN_CONFIGS = [
    osp.join(
        ROOT, 'configs', 'swin', f'elliptical-swin-{size}-patch4-'
        'window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py')
    for size in ('tiny', 'small', 'base')
]


@pytest.mark.parametrize('path', SWIN_CONFIGS)
def test_swin_config_forward_loss_backward(path):
    cfg = Config.fromfile(path)
    embed = cfg.model.backbone.embed_dims // 4  # heads keep their number
    widths = [embed * 2**i for i in range(4)]
    _, model, losses = tiny_train_step(
        path, {
            'model.backbone.embed_dims': embed,
            'model.decode_head.in_channels': widths,
            'model.decode_head.channels': 16,
            'model.auxiliary_head.in_channels': widths[2],
            'model.auxiliary_head.channels': 16,
        })
    assert type(model.backbone) is EllipticalSwinTransformer
    depths = cfg.model.backbone.depths
    assert len(model.backbone.elliptical_layers) == sum(depths) - 4
    assert {'decode.loss_ce', 'aux.loss_ce'} <= set(losses)


BEIT_CONFIGS = {
    'beit':
    (EllipticalBEiT,
     osp.join(ROOT, 'configs', 'beit', 'elliptical-beit-base_upernet_'
              '8xb2-160k_ade20k-640x640.py')),
    'mae':
    (EllipticalMAE,
     osp.join(ROOT, 'configs', 'mae', 'elliptical-mae-base_upernet_'
              '8xb2-amp-160k_ade20k-512x512.py')),
}


@pytest.mark.parametrize('kind', sorted(BEIT_CONFIGS))
def test_beit_config_forward_loss_backward(kind):
    """Shrunk to 48 channels and 64 x 64 images (12 layers kept); the layer
    decay optimiser of the configs recognises the elliptical backbones."""
    cls, path = BEIT_CONFIGS[kind]
    width = 48
    cfg, model, losses = tiny_train_step(
        path, {
            'model.backbone.img_size': (64, 64),
            'model.backbone.embed_dims': width,
            'model.backbone.num_heads': 4,
            'model.neck.embed_dim': width,
            'model.decode_head.in_channels': [width] * 4,
            'model.decode_head.channels': 16,
            'model.auxiliary_head.in_channels': width,
            'model.auxiliary_head.channels': 16,
        })
    assert type(model.backbone) is cls
    assert model.backbone.elliptical_layers == tuple(range(1, 12))
    assert {'decode.loss_ce', 'aux.loss_ce'} <= set(losses)
    with DefaultScope.overwrite_default_scope('mmseg'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    scales = {g['lr_scale'] for g in optim.optimizer.param_groups}
    assert len(scales) == 12 + 2  # one per layer, the embedding, the heads
