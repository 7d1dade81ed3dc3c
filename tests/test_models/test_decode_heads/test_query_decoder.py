"""EllipticalMask2FormerHead and EllipticalMaskFormerHead against oracles.

The oracles (:func:`oracles.naive_mask2former`,
:func:`oracles.naive_maskformer`) rewrite mmdet's decoder loops around
:func:`oracles.naive_attention`: mmcv's ``MultiheadAttention`` as mmdet's
decoder layers call it (positions added to the queries' and keys' inputs,
not the values'), with ``q @ diag(m)`` and ``m`` from the values of the
previous decoder layer over the queries, threaded by hand.
"""
import copy
import functools
import os.path as osp

import pytest
import torch
from builders import ROOT, build_module, seg_samples
from checks import (as_list, check_interchange,
                    check_loss_trains_every_parameter, grads, outputs_loss)
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmengine.config import Config
from oracles import naive_mask2former, naive_maskformer
from shipped_configs import tiny_query_head

from mmseg_elliptical.models import (EllipticalAttention,
                                     EllipticalMask2FormerHead,
                                     EllipticalMaskFormerHead, to_elliptical)

pytest.importorskip('mmdet')
pytestmark = pytest.mark.usefixtures('single_thread')

C, HEADS, QUERIES, LAYERS, CLASSES = 16, 2, 6, 4, 5
IN_CHANNELS = [8, 16, 32, 64]
IMAGE = 64  # features at 1/4 .. 1/32
CONFIGS = {
    'mask2former': ('configs/mask2former/mask2former_elliptical-swin-t_8xb2-'
                    '160k_ade20k-512x512.py', EllipticalMask2FormerHead),
    'maskformer': ('configs/maskformer/maskformer_elliptical-swin-t_upernet_'
                   '8xb2-160k_ade20k-512x512.py', EllipticalMaskFormerHead),
}


@functools.lru_cache
def shipped_head(kind: str) -> dict:
    return Config.fromfile(osp.join(ROOT, CONFIGS[kind][0])).model.decode_head


def head_config(kind: str, **changes) -> dict:
    """The shipped config's head at a tiny size, without dropout."""
    head = tiny_query_head(
        copy.deepcopy(shipped_head(kind)),
        IN_CHANNELS,
        num_queries=QUERIES,
        num_points=64,
        channels=C,
        heads=HEADS)
    head.num_classes = CLASSES
    dec = head.transformer_decoder
    dec.num_layers = LAYERS
    for attn in ('self_attn_cfg', 'cross_attn_cfg'):
        dec.layer_cfg[attn].update(attn_drop=0., proj_drop=0.)
    dec.layer_cfg.ffn_cfg.ffn_drop = 0.
    head.loss_cls.class_weight = [1.0] * CLASSES + [0.1]
    head.type = CONFIGS[kind][1].__name__
    head.update(changes)
    return head


def build(cfg: dict, seed: int = 0) -> torch.nn.Module:
    head = build_module(cfg, seed)
    with torch.no_grad():  # queries and biases that matter
        for name, p in head.named_parameters():
            if 'query' in name or name.endswith('in_proj_bias'):
                p.normal_()
    return head


def mmseg_config(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg.type = cfg.type.replace('Elliptical', '')
    for arg in ('elliptical_layers', 'relevance_reduction', 'relevance_eps'):
        cfg.pop(arg, None)
    return cfg


def features(batch: int = 2, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(
            batch, c, IMAGE >> (2 + i), IMAGE >> (2 + i), generator=gen)
        for i, c in enumerate(IN_CHANNELS)
    ]


def samples(labels: bool = False):
    """Two samples, the second image padded (MaskFormer's padding mask is
    not empty); ground truth with ``labels``."""
    return seg_samples(
        2,
        IMAGE,
        IMAGE,
        CLASSES if labels else None,
        heights=(IMAGE, IMAGE - 20))


def naive(kind, head, feats, data_samples, reduction='mean'):
    if kind == 'mask2former':
        return naive_mask2former(head, feats, reduction)
    return naive_maskformer(head, feats, data_samples, reduction)


def assert_outputs_close(got, ref, atol=1e-5, rtol=1e-4):
    got, ref = as_list(got), as_list(ref)
    assert len(got) == len(ref) > 0
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


KINDS = sorted(CONFIGS)


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('layers, reduction', [(None, 'mean'), ([2], 'mean'),
                                               ([1, 3], 'median')])
def test_forward_matches_oracle(kind, layers, reduction):
    head = build(
        head_config(
            kind, elliptical_layers=layers,
            relevance_reduction=reduction)).eval()
    if layers is None:  # every decoder layer but the first
        assert head.elliptical_layers == tuple(range(1, LAYERS))
    feats, data = features(), samples()
    with torch.no_grad():
        got = head(feats, data)
        assert_outputs_close(got, naive(kind, head, feats, data, reduction))
        # and it is not the dot-product head
        ref = build(mmseg_config(head_config(kind))).eval()
        ref.load_state_dict(head.state_dict())
        assert not torch.allclose(
            got[0][-1], ref(feats, data)[0][-1], atol=1e-3)


@pytest.mark.parametrize('kind', KINDS)
def test_gradients_match_oracle(kind):
    """Train mode (no dropout): every parameter's gradient is the oracle's,
    whose ``m`` is a constant (computed from detached values)."""
    head = build(head_config(kind)).train()
    feats, data = features(), samples()
    outputs_loss(head(feats, data)).backward()
    got = grads(head)
    head.zero_grad()
    outputs_loss(naive(kind, head, feats, data)).backward()
    ref = grads(head)
    assert got.keys() == ref.keys()
    assert any('self_attn' in n for n in got)
    for name in ref:
        torch.testing.assert_close(
            got[name], ref[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize('kind', KINDS)
def test_dot_product_mode_is_mmseg_head(kind):
    cfg = head_config(kind, elliptical_layers=[])
    ref, dot = build(mmseg_config(cfg)), build(cfg)
    assert type(ref) is type(dot).mmseg_class()
    # same seed, same weights: the conversion consumes no RNG, adds nothing
    a, b = ref.state_dict(), dot.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    feats, data = features(), samples()
    for mode in ('eval', 'train'):
        getattr(ref, mode)(), getattr(dot, mode)()
        with torch.set_grad_enabled(mode == 'train'):
            assert_outputs_close(
                dot(feats, data), ref(feats, data), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('kind', KINDS)
def test_checkpoints_load_both_ways_strictly(kind):
    ref, ours = build(mmseg_config(head_config(kind))), build(
        head_config(kind), seed=1)
    check_interchange(ref, ours)


@pytest.mark.parametrize('kind', KINDS)
def test_decoder_layers_and_chain(kind):
    head = build(head_config(kind, elliptical_layers=[1, 3]))
    layers, = head.layer_stages()
    assert list(layers) == list(head.transformer_decoder.layers)
    assert [type(layer.self_attn)
            for layer in layers] == [EllipticalAttention] * LAYERS
    assert [layer.self_attn.elliptical
            for layer in layers] == [False, True, False, True]
    # the cross-attention is mmcv's, untouched
    assert all(
        type(layer.cross_attn) is MultiheadAttention for layer in layers)
    chain = layers[0].value_chain
    assert all(layer.value_chain is chain for layer in layers)
    assert [layer.chain_index for layer in layers] == list(range(LAYERS))


@pytest.mark.parametrize('kind', KINDS)
def test_to_elliptical_converts_a_built_mmseg_head(kind):
    """In place, with the weights it has: the same head as one built
    elliptical (from the same seed)."""
    head = build(mmseg_config(head_config(kind))).eval()
    built = build(head_config(kind)).eval()
    feats, data = features(), samples()
    assert to_elliptical(head) is head
    assert type(head) is CONFIGS[kind][1]
    assert head.elliptical_layers == tuple(range(1, LAYERS))
    with torch.no_grad():
        assert_outputs_close(head(feats, data), built(feats, data))
        assert_outputs_close(head(feats, data), naive(kind, head, feats, data))


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('changes, error, match', [
    (dict(elliptical_layers=[0]), ValueError,
     'layer 0 has no previous layer.s values'),
    (dict(elliptical_layers=[LAYERS]), ValueError, r'in 1\.\.3'),
    (dict(relevance_reduction='max'), ValueError, 'relevance_reduction'),
    (dict(elliptical_layer=[1]), TypeError,
     "unexpected keyword argument 'elliptical_layer'; did you mean "
     "'elliptical_layers'"),
])
def test_bad_arguments(kind, changes, error, match):
    with pytest.raises(error, match=match):
        build(head_config(kind, **changes))


@pytest.mark.parametrize('kind', KINDS)
def test_bad_inputs(kind):
    head = build(head_config(kind)).eval()
    name = CONFIGS[kind][1].__name__
    feats = features()
    with pytest.raises(
            ValueError,
            match=r'in_channels=\[8, 16, 32, 64\] '
            r'but the feature maps have \[8, 16, 32, 48\]'):
        head(feats[:3] + [feats[3][:, :48]], samples())
    with pytest.raises(ValueError, match=f'{name} expects the backbone'):
        head(feats[0], samples())
    feats[2][0, 0, 0, 0] = float('nan')
    with pytest.raises(ValueError, match=r'feature maps \[2\] contain NaN'):
        head(feats, samples())


@pytest.mark.parametrize('kind', KINDS)
def test_loss_trains_every_parameter(kind):
    head = build(head_config(kind)).train()
    losses = head.loss(features(), samples(labels=True), None)
    check_loss_trains_every_parameter(head, losses)


# --- the attention as mmdet's decoder layers call it -----------------------


def attention_pair():
    torch.manual_seed(0)
    ref = MultiheadAttention(C, HEADS, batch_first=True).eval()
    with torch.no_grad():
        ref.attn.in_proj_bias.normal_()
    ours = copy.deepcopy(ref)
    return ref, to_elliptical(ours)


@pytest.mark.parametrize('positions', ['both', 'query', 'key', 'none'])
def test_attention_with_positions_is_mmcvs(positions):
    """Outside a chain, the converted attention computes mmcv's for the
    arguments mmdet's decoder layers pass (``key_pos`` defaults to
    ``query_pos``, as in mmcv)."""
    ref, ours = attention_pair()
    x, p, p2 = (torch.randn(2, QUERIES, C) for _ in range(3))
    kwargs = dict(
        both=dict(query_pos=p, key_pos=p2),
        query=dict(query_pos=p),
        key=dict(key_pos=p2),
        none={})[positions]
    with torch.no_grad():
        expected = ref(query=x, key=x, value=x, **kwargs)
        got = ours(
            query=x, key=x, value=x, query_key_padding_mask=None, **kwargs)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    if positions != 'none':
        torch.testing.assert_close(
            ours(query=x, key=x, value=x)[0],
            ref(query=x)[0])
        assert not torch.allclose(got, ours(x), atol=1e-3)


def test_attention_rejects_what_it_does_not_compute():
    _, ours = attention_pair()
    x, y = torch.randn(2, QUERIES, C), torch.randn(2, QUERIES, C)
    with pytest.raises(TypeError, match=r"got \['key'\]"):
        ours(query=x, key=y)
    with pytest.raises(TypeError, match=r"got \['value'\]"):
        ours(query=x, key=x, value=y)
    mask = torch.zeros(QUERIES, QUERIES, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"without masks.*\['attn_mask'\]"):
        ours(query=x, attn_mask=mask)
    with pytest.raises(TypeError, match=r"\['key_padding_mask'\]"):
        ours(query=x, key_padding_mask=mask[:2])
