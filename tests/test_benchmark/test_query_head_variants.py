"""The benchmark's variants of the Mask2Former / MaskFormer configs, whose
heads need the data samples to run as ``mode='tensor'`` does; their attack
steps."""
import os.path as osp

import pytest
import torch
from builders import ROOT

from mmseg_elliptical.benchmark.variants import (ATTACK_MODES, BenchForward,
                                                 build_model, derive_variants,
                                                 make_step)
from mmseg_elliptical.utils.config import load_config

pytest.importorskip('mmdet')
pytestmark = pytest.mark.usefixtures('single_thread')

CONFIGS = {
    'mask2former':
    'configs/mask2former/mask2former_elliptical-swin-t_'
    'elliptical-mask_8xb2-160k_ade20k-512x512.py',
    'maskformer':
    'configs/maskformer/maskformer_elliptical-swin-t_'
    'elliptical-mask_8xb2-160k_ade20k-512x512.py',
}
C = 16


def tiny(kind: str) -> dict:
    """The config's model with a tiny Swin and head, offline."""
    widths = [24 * 2**i for i in range(4)]
    options = {
        'model.backbone.embed_dims': 24,
        'model.backbone.depths': [2, 2, 2, 2],
        'model.decode_head.in_channels': widths,
        'model.decode_head.feat_channels': C,
        'model.decode_head.out_channels': C,
        'model.decode_head.num_queries': 4,
        'model.decode_head.pixel_decoder.norm_cfg.num_groups': 4,
        'model.decode_head.positional_encoding.num_feats': C // 2,
        'model.decode_head.transformer_decoder.num_layers': 3,
    }
    layer = 'model.decode_head.transformer_decoder.layer_cfg'
    for attn in ('self_attn_cfg', 'cross_attn_cfg'):
        options[f'{layer}.{attn}.embed_dims'] = C
    options[f'{layer}.ffn_cfg.embed_dims'] = C
    if kind == 'mask2former':
        encoder = 'model.decode_head.pixel_decoder.encoder'
        options.update({
            f'{encoder}.num_layers':
            1,
            f'{encoder}.layer_cfg.self_attn_cfg.embed_dims':
            C,
            f'{encoder}.layer_cfg.ffn_cfg.embed_dims':
            C,
            'model.decode_head.pixel_decoder.positional_encoding.num_feats':
            C // 2,
        })
    path = osp.join(ROOT, CONFIGS[kind])
    return path, load_config(path, options, no_pretrained=True).model.to_dict()


@pytest.mark.parametrize('kind', sorted(CONFIGS))
def test_variants_run_the_head_on_made_samples(kind):
    path, model_cfg = tiny(kind)
    specs = derive_variants(kind, path, model_cfg, whole_model=True)
    heads = {s.role: s.model_cfg['decode_head'] for s in specs}
    name = 'Mask2FormerHead' if kind == 'mask2former' else 'MaskFormerHead'
    assert heads['elliptical']['type'] == f'Elliptical{name}'
    assert heads['fused-dot']['elliptical_layers'] == []
    assert heads['mmseg-dot']['type'] == name
    assert 'elliptical_layers' not in heads['mmseg-dot']
    x = torch.randn(1, 3, 64, 64)
    outs = {}
    for spec in specs:
        model = build_model(spec)
        assert type(model) is BenchForward and model.head_needs_samples
        make_step(model, x, 'train')()  # forward and backward
        assert model.model.decode_head.query_embed.weight.grad is not None
        make_step(model, x, 'infer')()
        with torch.no_grad():
            cls_scores, mask_preds = model(x)
        outs[spec.role] = (cls_scores[-1], mask_preds[-1])
    assert outs['elliptical'][1].shape[-2:] == (16, 16)  # masks at 1/4
    for a, b in zip(outs['fused-dot'], outs['mmseg-dot']):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(
        outs['elliptical'][0], outs['fused-dot'][0], atol=1e-4)


@pytest.mark.parametrize('kind', sorted(CONFIGS))
def test_attack_steps_through_the_decoder(kind):
    """The attack steps with a dot-product backbone: the input gradient
    only, and the adaptive one differs only through the elliptical decoder.
    """
    path, model_cfg = tiny(kind)
    model_cfg['backbone']['elliptical_layers'] = []
    specs = derive_variants(kind, path, model_cfg, whole_model=True)
    x = torch.randn(1, 3, 64, 64)
    for spec in specs:
        model = build_model(spec)
        plain, adaptive = (make_step(model, x, m)() for m in ATTACK_MODES)
        assert not model.training and plain.shape == x.shape
        assert plain.abs().sum() > 0
        assert all(p.grad is None for p in model.parameters())
        if spec.role == 'elliptical':
            assert (adaptive - plain).abs().max() > 1e-3 * plain.abs().max()
        else:
            torch.testing.assert_close(adaptive, plain, rtol=0, atol=0)
