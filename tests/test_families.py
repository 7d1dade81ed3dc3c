"""Every family config at a tiny size: dot-product mode is mmseg's model, the
elliptical model trains; MiT and Twins-PCPVT against per-layer oracles.

The oracles write the attention of each block out (queries from the tokens,
keys and values from the spatially reduced tokens, ``q @ diag(m)`` with ``m``
from the values of the previous block of the stage, threaded by hand) and use
mmseg's modules only for what elliptical attention does not change (patch
embeddings, MixFFN/FFN, norms, the reduction conv, position encodings).
"""
import copy
import glob
import os.path as osp

import pytest
import torch
from conftest import ROOT, check_interchange
from mmengine.config import Config, ConfigDict
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.models.utils import nchw_to_nlc, nlc_to_nchw
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample
from test_configs import MMSEG_NAMES, mmseg_base
from test_elliptical_attention import naive_relevance

from mmseg_elliptical.models import (EllipticalMixVisionTransformer,
                                     EllipticalPCPVT)
from mmseg_elliptical.utils import mmseg_config_path

pytestmark = pytest.mark.usefixtures('single_thread')

FAMILY_DIRS = ('setr', 'vit', 'dpt', 'segformer', 'twins')
CONFIGS = sorted(
    p for d in FAMILY_DIRS
    for p in glob.glob(osp.join(ROOT, 'configs', d, '*.py')))
SIZE = 64


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
        elif key == 'type' and value == 'SyncBN':
            cfg[key] = 'BN'
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
            cfg[part] = _map_channels(cfg[part], mapping)
    return cfg


def build(model_cfg: ConfigDict, **backbone) -> torch.nn.Module:
    init_default_scope('mmseg')
    cfg = copy.deepcopy(model_cfg)
    cfg.backbone.update(backbone)
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    model.init_weights()
    return model


def samples(n: int):
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        s = SegDataSample()
        s.gt_sem_seg = PixelData(
            data=torch.randint(0, 150, (1, SIZE, SIZE), generator=gen))
        s.set_metainfo(
            dict(
                img_shape=(SIZE, SIZE),
                ori_shape=(SIZE, SIZE),
                pad_shape=(SIZE, SIZE)))
        out.append(s)
    return out


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_family_config(path):
    ours_cfg = tiny(Config.fromfile(path).model)
    mmseg_cfg = tiny(
        Config.fromfile(mmseg_config_path(mmseg_base(path))).model)
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
    losses = model.loss(x, samples(2))
    loss = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(loss)
    loss.backward()
    missing = [
        n for n, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    ]
    assert not missing, missing
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)


# --- per-layer oracles for the hierarchical backbones ----------------------


def naive_reduced_attention(attn, x, hw, v_prev):
    """EfficientMultiheadAttention written out: returns (out, v)."""
    C = x.shape[-1]
    H = attn.num_heads
    w, b = attn.attn.in_proj_weight, attn.attn.in_proj_bias
    x_kv = x
    if attn.sr_ratio > 1:
        x_kv = attn.norm(nchw_to_nlc(attn.sr(nlc_to_nchw(x, hw))))

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], H, C // H).transpose(1, 2)

    q = heads(x @ w[:C].T + b[:C])
    k = heads(x_kv @ w[C:2 * C].T + b[C:2 * C])
    v = heads(x_kv @ w[2 * C:].T + b[2 * C:])
    if v_prev is not None:
        q = q @ torch.diag_embed(naive_relevance(v, v_prev)[:, :, 0])
    probs = (q @ k.transpose(-2, -1) / (C // H)**0.5).softmax(-1)
    out = (probs @ v).transpose(1, 2).reshape(x.shape)
    return attn.attn.out_proj(out), v


def naive_mit(model, x):
    outs = []
    for i, (embed, blocks, norm) in enumerate(model.layers):
        x, hw = embed(x)
        v_prev = None
        for block in blocks:
            out, v = naive_reduced_attention(
                block.attn, block.norm1(x), hw,
                v_prev if block.attn.elliptical else None)
            x = x + out
            x = block.ffn(block.norm2(x), hw, identity=x)
            v_prev = v
        x = nlc_to_nchw(norm(x), hw)
        outs.append(x)
    return outs


def naive_pcpvt(model, x):
    outs = []
    for i in range(len(model.depths)):
        x, hw = model.patch_embeds[i](x)
        v_prev = None
        for j, block in enumerate(model.layers[i]):
            out, v = naive_reduced_attention(
                block.attn, block.norm1(x), hw,
                v_prev if block.attn.elliptical else None)
            x = x + out
            x = x + block.ffn(block.norm2(x))
            v_prev = v
            if j == 0:
                x = model.position_encodings[i](x, hw)
        x = nlc_to_nchw(x, hw)
        outs.append(x)
    return outs


HIERARCHICAL = {
    'mit': (EllipticalMixVisionTransformer, naive_mit,
            dict(
                embed_dims=8,
                num_heads=[1, 2, 2, 4],
                num_layers=[3, 2, 2, 2],
                sr_ratios=[4, 2, 2, 1])),
    'pcpvt': (EllipticalPCPVT, naive_pcpvt,
              dict(
                  embed_dims=[8, 16, 16, 32],
                  num_heads=[1, 2, 2, 4],
                  depths=[3, 2, 2, 2],
                  qkv_bias=True)),
}


@pytest.mark.parametrize('kind', sorted(HIERARCHICAL))
@pytest.mark.parametrize('layers', [None, [2], [2, 4, 8]])
def test_hierarchical_against_oracle(kind, layers):
    cls, naive, arch = HIERARCHICAL[kind]
    torch.manual_seed(0)
    model = cls(elliptical_layers=layers, **arch)
    model.init_weights()
    model.eval()
    if layers is None:  # every block but the first of each stage
        assert model.elliptical_layers == (1, 2, 4, 6, 8)
    flags = [
        b.attn.elliptical for stage in model.layer_stages() for b in stage
    ]
    assert [i for i, f in enumerate(flags)
            if f] == list(model.elliptical_layers)
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        for got, ref in zip(model(x), naive(model, x)):
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('kind', sorted(HIERARCHICAL))
def test_hierarchical_degenerate_inputs(kind):
    cls, _, arch = HIERARCHICAL[kind]
    torch.manual_seed(0)
    model = cls(**arch)
    model.init_weights()
    model.train()
    shape = (2, 3, 64, 64)
    inputs = (torch.zeros(shape), torch.full(shape,
                                             1e4), torch.full(shape, 0.5))
    for x in inputs:
        x.requires_grad_()
        model.zero_grad()
        feats = model(x)
        assert all(torch.isfinite(f).all() for f in feats)
        sum(f.square().mean() for f in feats).backward()
        assert torch.isfinite(x.grad).all()
        assert all(
            torch.isfinite(p.grad).all() for p in model.parameters()
            if p.grad is not None)
