"""Every family config at a tiny size: dot-product mode is mmseg's model,
and the elliptical model trains (a loss step through the whole
segmentor)."""
import copy
import os.path as osp

import pytest
import torch
from builders import ROOT, seg_samples
from checks import (check_interchange, check_loss_trains_every_parameter,
                    tiny_train_step)
from mmengine.config import Config, ConfigDict
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope, init_default_scope
from mmseg.registry import MODELS
from shipped_configs import config_paths, mmseg_base, tiny_head_model

from mmseg_elliptical.models import (EllipticalBEiT, EllipticalMAE,
                                     EllipticalSwinTransformer)
from mmseg_elliptical.utils import load_config

pytestmark = pytest.mark.usefixtures('single_thread')

FAMILY_DIRS = ('setr', 'vit', 'dpt', 'segformer', 'twins')
CONFIGS = config_paths(*FAMILY_DIRS)
SIZE = 64


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
    ours_cfg = tiny_head_model(Config.fromfile(path).model, SIZE)
    mmseg_cfg = tiny_head_model(load_config(mmseg_base(path)).model, SIZE)
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
