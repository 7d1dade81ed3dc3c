"""``benchmark/variants.py``: the derived baselines of a config (fused-dot,
mmseg-dot, paper-ref), the one forward the benchmark measures
(``BenchForward``: timed, counted, exported) and the paper reference against
``oracles.naive_attention``."""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from bench_builders import BENCH_MMSEG_VIT_T, BENCH_TINY, tiny_variants
from builders import ROOT
from mmseg.models.backbones import VisionTransformer
from oracles import naive_attention

from mmseg_elliptical.benchmark.flops import count_flops
from mmseg_elliptical.benchmark.variants import (BenchForward, build_model,
                                                 config_variants,
                                                 derive_variants, make_step)
from mmseg_elliptical.models import EllipticalTransformerMixin
from mmseg_elliptical.models.conversion import ELLIPTICAL_VERSIONS
from mmseg_elliptical.utils.config import load_config

pytestmark = pytest.mark.usefixtures('single_thread')


def test_variants_of_an_elliptical_config():
    ell, fused, dot, paper = tiny_variants()
    assert [v.role for v in (ell, fused, dot, paper)] == \
        ['elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref']
    assert ell.model_cfg['backbone']['type'] == 'EllipticalVisionTransformer'
    assert fused.model_cfg['backbone']['elliptical_layers'] == []
    assert fused.model_cfg['backbone']['type'] == \
        'EllipticalVisionTransformer'
    assert dot.model_cfg['backbone']['type'] == 'VisionTransformer'
    assert paper.model_cfg == ell.model_cfg and paper.explicit_attention
    # The head is mmseg's in this config: the same in every variant.
    assert {v.model_cfg['decode_head']['type']
            for v in (ell, fused, dot)} == {'SegmenterMaskTransformerHead'}
    with pytest.raises(ValueError, match='Unknown roles'):
        tiny_variants(['elliptical', 'fast'])


def test_variants_of_mmseg_config_and_elliptical_head():
    ell, fused, dot = tiny_variants(('elliptical', 'fused-dot', 'mmseg-dot'),
                                    config=BENCH_MMSEG_VIT_T)
    assert ell.model_cfg['backbone']['type'] == 'EllipticalVisionTransformer'
    assert dot.model_cfg['backbone']['type'] == 'VisionTransformer'
    head_cfg = osp.join(
        ROOT, 'configs', 'segmenter',
        'segmenter_elliptical-vit-t_elliptical-mask_8xb1-160k_ade20k-'
        '512x512.py')
    cfg = load_config(
        head_cfg,
        dict(
            BENCH_TINY, **{
                'model.decode_head.elliptical_layers': [1],
                'model.backbone.relevance_eps': 1e-5
            }),
        no_pretrained=True)
    ell, fused, dot = derive_variants(
        'h',
        head_cfg,
        cfg.model.to_dict(), ('elliptical', 'fused-dot', 'mmseg-dot'),
        whole_model=True)
    assert fused.model_cfg['decode_head']['elliptical_layers'] == []
    assert dot.model_cfg['decode_head']['type'] == \
        'SegmenterMaskTransformerHead'
    for part in ('backbone', 'decode_head'):
        assert not {'elliptical_layers', 'relevance_eps'} & set(
            dot.model_cfg[part])
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        outs = [build_model(v)(x) for v in (fused, dot)]
    segmentor = build_model(fused).model
    with torch.no_grad():  # the segmentor's own mode='tensor'
        torch.testing.assert_close(outs[0], segmentor(x, mode='tensor'))
    torch.testing.assert_close(outs[0], outs[1])


def test_variants_of_every_elliptical_backbone():
    backbones = {
        src: cls
        for src, cls in ELLIPTICAL_VERSIONS.items()
        if issubclass(cls, EllipticalTransformerMixin)
        and 'backbone' in cls.__module__
    }
    assert {'VisionTransformer', 'MixVisionTransformer',
            'PCPVT'} <= {s.__name__
                         for s in backbones}
    for src, cls in backbones.items():
        for backbone in (dict(type=src.__name__),
                         dict(
                             type=cls.__name__,
                             elliptical_layers=[1],
                             relevance_eps=1e-5)):
            model = dict(type='EncoderDecoder', backbone=backbone)
            ell, fused, dot = derive_variants(
                'x', 'x.py', model, ('elliptical', 'fused-dot', 'mmseg-dot'))
            assert ell.model_cfg['backbone']['type'] == cls.__name__
            assert fused.model_cfg['backbone']['elliptical_layers'] == []
            assert dot.model_cfg['backbone'] == dict(type=src.__name__)


def test_backbone_without_elliptical_version_is_measured_as_is():
    model = dict(type='EncoderDecoder', backbone=dict(type='ResNetV1c'))
    variants = derive_variants('r', 'r.py', model)
    assert [(v.name, v.role) for v in variants] == [('r', 'model')]
    assert variants[0].model_cfg == model


def test_built_variants_share_weights_and_dot_products_agree():
    models = {v.role: build_model(v) for v in tiny_variants()}
    assert all(type(m) is BenchForward for m in models.values())
    assert type(models['mmseg-dot'].model) is VisionTransformer
    states = [m.state_dict() for m in models.values()]
    for state in states[1:]:
        assert state.keys() == states[0].keys()
        assert all(torch.equal(state[k], states[0][k]) for k in state)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out = {r: m(x)[-1] for r, m in models.items()}
    torch.testing.assert_close(out['fused-dot'], out['mmseg-dot'])
    torch.testing.assert_close(out['paper-ref'], out['elliptical'])
    assert not torch.allclose(out['elliptical'], out['fused-dot'])
    flops = {r: count_flops(m, x)[0] for r, m in models.items()}
    assert flops['elliptical'] == flops['fused-dot'] == flops['paper-ref']


def test_paper_reference_against_independent_formulation(monkeypatch):
    spec = tiny_variants(('paper-ref', ))[0]
    model = build_model(spec)
    calls = []

    def record(module, args, kwargs, output):
        calls.append((module, args[0], kwargs['identity'], output))

    for layer in model.model.layers:
        layer.attn.register_forward_hook(record, with_kwargs=True)

    def no_sdpa(*args, **kwargs):
        raise AssertionError('the paper reference ran the fused path')

    monkeypatch.setattr(F, 'scaled_dot_product_attention', no_sdpa)
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 64))
    assert len(calls) == 3
    v_prev = None
    for attn, x, identity, output in calls:
        ref, v_prev = naive_attention(attn, x, v_prev, identity=identity)
        torch.testing.assert_close(output, ref, atol=1e-5, rtol=1e-5)


def test_one_forward_is_timed_and_counted(monkeypatch):
    """The steps and the FLOP count run ``BenchForward.forward``: here the
    backbone's forward (the onnxruntime row exports the same module:
    ``tests/test_deploy/test_benchmark_onnx.py``)."""
    model = build_model(tiny_variants(('elliptical', ))[0])
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():  # the backbone's own forward, output for output
        for a, b in zip(model(x), model.model(x), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    calls = []
    monkeypatch.setattr(
        model.model,
        'forward',
        lambda inputs, _forward=model.model.forward:
        (calls.append(tuple(inputs.shape)), _forward(inputs))[1])
    make_step(model, x, 'infer')()
    make_step(model, x, 'train')()
    assert count_flops(model, x)[0] > 0
    assert calls[:2] == [(1, 3, 32, 32)] * 2 and len(calls) >= 3


def test_config_variants_name_each_config():
    specs = config_variants([BENCH_MMSEG_VIT_T, BENCH_MMSEG_VIT_T], ['a', 'b'],
                            ('elliptical', 'fused-dot'),
                            cfg_options=BENCH_TINY)
    assert [s.name for s in specs] == [
        'a/elliptical', 'a/fused-dot', 'b/elliptical', 'b/fused-dot'
    ]
    assert [s.family for s in specs] == ['a', 'a', 'b', 'b']
    assert specs[0].model_cfg['backbone']['num_layers'] == 3
    assert specs[0].model_cfg['pretrained'] is None  # nothing downloaded
    one, = config_variants([BENCH_MMSEG_VIT_T], ['vit'], ('elliptical', ))
    assert one.name == 'elliptical'
