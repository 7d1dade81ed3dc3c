"""The attention kinds of the ViT family against a naive, materialised oracle.

``naive_attention`` below is the paper's formulation written out with loops
over images and heads and ``q @ diag(m)``; it shares no code with the
package. Every path of the package (fused with q from its own GEMM and
``q * m`` when gradients are on, fused with one qkv GEMM and an in-place
``q *= m`` under no-grad, explicit with materialised probabilities) must
give its outputs, values and gradients.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import check_attention_dropout
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmseg.models.backbones.mit import EfficientMultiheadAttention
from mmseg.models.backbones.twins import GlobalSubsampledAttention
from mmseg.models.utils import nchw_to_nlc, nlc_to_nchw

from mmseg_elliptical.models import (AttentionRecord, ConversionError,
                                     EllipticalAttention,
                                     EllipticalEfficientMultiheadAttention,
                                     EllipticalGlobalSubsampledAttention,
                                     relevance, to_elliptical)

B, HW, C, H = 2, (4, 6), 24, 3
N = HW[0] * HW[1]
D = C // H
KINDS = ('vit', 'mit', 'twins')


def naive_relevance(v, v_prev, reduction='mean'):
    """m per (image, head) written with explicit loops over heads."""
    out = torch.empty(v.shape[0], v.shape[1], 1, v.shape[-1])
    for b in range(v.shape[0]):
        for h in range(v.shape[1]):
            diff = (v[b, h] - v_prev[b, h]).abs()  # [N, d]
            m = diff.mean(0) if reduction == 'mean' else diff.median(0).values
            out[b, h, 0] = m / m.max()
    return out


def kv_tokens(attn, x):
    """The key/value tokens: x, or MiT/Twins' spatially reduced x."""
    if getattr(attn, 'sr_ratio', 1) > 1:
        return attn.norm(nchw_to_nlc(attn.sr(nlc_to_nchw(x, HW))))
    return x


def naive_attention(attn, x, v_prev=None, reduction='mean', identity=None):
    """x + out_proj(softmax((q diag(m)) k^T / sqrt(d)) v), materialised."""
    w, bias = attn.attn.in_proj_weight, attn.attn.in_proj_bias
    if bias is None:
        bias = torch.zeros(3 * C)
    x_kv = kv_tokens(attn, x)
    q = x @ w[:C].T + bias[:C]
    k = x_kv @ w[C:2 * C].T + bias[C:2 * C]
    v = x_kv @ w[2 * C:].T + bias[2 * C:]

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], H, D).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    if v_prev is not None:
        m = naive_relevance(v.detach(), v_prev, reduction)
        q = q @ torch.diag_embed(m[:, :, 0])
    scores = q @ k.transpose(-2, -1) / D**0.5
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
    identity = x if identity is None else identity
    return identity + attn.attn.out_proj(out), v


def build(kind, bias=True, **kwargs):
    """An elliptical attention of ``kind`` with non-trivial biases."""
    torch.manual_seed(0)
    if kind == 'vit':
        attn = EllipticalAttention(C, H, bias=bias, **kwargs)
    elif kind == 'mit':
        attn = EllipticalEfficientMultiheadAttention(
            C, H, qkv_bias=bias, sr_ratio=2, **kwargs)
    else:
        attn = EllipticalGlobalSubsampledAttention(
            C, H, qkv_bias=bias, sr_ratio=2, **kwargs)
    if bias:
        with torch.no_grad():
            attn.attn.in_proj_bias.normal_()
    return attn.eval()


def call(attn, x, v_prev=None, identity=None):
    """Run ``attn`` in a chain call; return its output and its values."""
    with attn.chained(v_prev, keep=True) as chain_call:
        if isinstance(attn, EllipticalEfficientMultiheadAttention):
            out = attn(x, HW, identity=identity)
        else:
            out = attn(x, identity=identity)
    return out, chain_call.values


def num_kv(kind):
    return N if kind == 'vit' else N // 4


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('batch', [1, B])
@pytest.mark.parametrize('bias', [True, False])
def test_matches_naive(kind, fused, grad, batch, bias):
    attn = build(kind, bias)
    attn.fused_attn = fused
    x = torch.randn(batch, N, C)
    v_prev = torch.randn(batch, H, num_kv(kind), D)
    identity = torch.randn(batch, N, C)
    with torch.set_grad_enabled(grad):
        out, v = call(attn, x, v_prev, identity)
        ref, ref_v = naive_attention(attn, x, v_prev, identity=identity)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, ref_v)
    assert not v.requires_grad
    # Without previous values: dot-product attention.
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(
            call(attn, x)[0],
            naive_attention(attn, x)[0],
            atol=1e-5,
            rtol=1e-5)


@pytest.mark.parametrize('reduction', ['mean', 'median'])
def test_median_reduction(reduction):
    attn = build('vit', relevance_reduction=reduction)
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    torch.testing.assert_close(
        call(attn, x, v_prev)[0],
        naive_attention(attn, x, v_prev, reduction)[0],
        atol=1e-5,
        rtol=1e-5)


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('elliptical', [True, False])
def test_explicit_probabilities_give_the_fused_output(kind, elliptical):
    """An attention map is what the model computed: the explicit path's
    probabilities applied to v reproduce the fused forward's output."""
    attn = build(kind, elliptical=elliptical)
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, num_kv(kind), D)
    with torch.no_grad():
        fused, v = call(attn, x, v_prev)
        attn.fused_attn = False
        attn.attention_record = AttentionRecord()
        call(attn, x, v_prev)
    probs, = attn.attention_record.probs
    assert probs.shape == (B, H, N, num_kv(kind))
    out = (probs @ v).transpose(1, 2).reshape(B, N, C)
    torch.testing.assert_close(
        x + attn.attn.out_proj(out), fused, atol=1e-5, rtol=1e-5)
    # Elliptical probabilities are not the dot-product ones.
    dot = (call(attn, x)[0] - fused).abs().max()
    assert (dot > 1e-3) == elliptical
    assert len(attn.attention_record.relevance) == int(elliptical)


@pytest.mark.parametrize('fused', [True, False])
def test_gradients_reach_qkv_but_not_m(fused):
    attn = build('vit').train()
    attn.fused_attn = fused
    x = torch.randn(B, N, C, requires_grad=True)
    v_prev = torch.randn(B, H, N, D, requires_grad=True)
    out, _ = call(attn, x, v_prev)
    out.square().sum().backward()
    assert v_prev.grad is None  # m is a constant for autograd
    grad_w = attn.attn.in_proj_weight.grad.clone()
    grad_x = x.grad.clone()
    for rows in (slice(0, C), slice(C, 2 * C), slice(2 * C, 3 * C)):
        assert grad_w[rows].abs().sum() > 0  # q, k and v all get gradient
    attn.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    ref, _ = naive_attention(attn, x2, v_prev.detach())
    ref.square().sum().backward()
    torch.testing.assert_close(
        grad_w, attn.attn.in_proj_weight.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad_x, x2.grad, atol=1e-4, rtol=1e-4)


def test_relevance_properties():
    v, v_prev = torch.randn(B, H, N, D), torch.randn(B, H, N, D)
    m = relevance(v, v_prev)
    assert m.shape == (B, H, 1, D)
    torch.testing.assert_close(m.amax(-1), torch.ones(B, H, 1))
    torch.testing.assert_close(m, naive_relevance(v, v_prev))
    # Scale invariance: delta in the paper cancels.
    torch.testing.assert_close(relevance(3 * v, 3 * v_prev), m)


def test_relevance_guard_no_nan():
    v = torch.randn(B, H, N, D)
    m = relevance(v, v.clone())  # no change at all: max = 0
    torch.testing.assert_close(m, torch.ones(B, H, 1, D))
    # One head without change, one with: only the first falls back.
    v_prev = v.clone()
    v_prev[:, 1] += torch.randn(B, N, D)
    m = relevance(v, v_prev)
    torch.testing.assert_close(m[:, 0], torch.ones(B, 1, D))
    torch.testing.assert_close(m[:, 1], naive_relevance(v, v_prev)[:, 1])


def test_identical_values_give_dot_product():
    attn = build('vit')
    x = torch.randn(B, N, C)
    out, v = call(attn, x)
    torch.testing.assert_close(call(attn, x, v)[0], out)


@pytest.mark.parametrize('elliptical', [True, False])
def test_fused_path_uses_sdpa_and_explicit_does_not(elliptical, monkeypatch):
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy)
    attn = build('vit', elliptical=elliptical)
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    call(attn, x, v_prev)
    assert calls == [(B, H, N, D)]
    attn.fused_attn = False
    call(attn, x, v_prev)
    assert len(calls) == 1


@pytest.mark.parametrize('fused', [True, False])
def test_attention_dropout_in_train_mode_only(fused):
    attn = build('vit', attn_drop=0.5)
    attn.fused_attn = fused
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    check_attention_dropout(attn, lambda: call(attn, x, v_prev)[0],
                            naive_attention(attn, x, v_prev)[0])


@pytest.mark.parametrize('kind', ['vit', 'mit'])
def test_dot_product_mode_equals_mmseg_module(kind):
    """Converted in place from mmcv's / mmseg's module: same numbers."""
    torch.manual_seed(0)
    if kind == 'vit':
        ref = MultiheadAttention(C, H, batch_first=True)
        expected_type = EllipticalAttention
    else:
        ref = EfficientMultiheadAttention(C, H, sr_ratio=2, qkv_bias=True)
        expected_type = EllipticalEfficientMultiheadAttention
    ref.eval()
    x, identity = torch.randn(B, N, C), torch.randn(B, N, C)
    args = (x, ) if kind == 'vit' else (x, HW)
    expected = ref(*args, identity=identity)
    attn = to_elliptical(ref)
    assert type(attn) is expected_type
    torch.testing.assert_close(
        attn(*args, identity=identity), expected, atol=1e-5, rtol=1e-5)


def test_conversion_keeps_parameters_and_rng():
    torch.manual_seed(0)
    mha = EfficientMultiheadAttention(C, H, sr_ratio=2, qkv_bias=True)
    params = dict(mha.named_parameters())
    state = torch.get_rng_state()
    new = to_elliptical(mha, relevance_reduction='median')
    assert new is mha and type(new) is EllipticalEfficientMultiheadAttention
    assert torch.equal(torch.get_rng_state(), state)
    assert dict(new.named_parameters()) == params  # the same tensors
    # sr and norm stay (they were silently dropped by an earlier version).
    assert sum(p.numel()
               for p in new.parameters()) == sum(p.numel()
                                                 for p in params.values())
    assert 'sr.weight' in params and 'norm.weight' in params
    assert new.relevance_reduction == 'median' and new.elliptical
    twins = to_elliptical(GlobalSubsampledAttention(C, H, sr_ratio=2))
    assert type(twins) is EllipticalGlobalSubsampledAttention


def test_conversion_checks_the_exact_type():

    class MyAttention(MultiheadAttention):
        pass

    with pytest.raises(
            TypeError,
            match=r'test_elliptical_attention\..*'
            r'MyAttention has no elliptical version \(the type '
            'must match exactly'):
        to_elliptical(MyAttention(C, H, batch_first=True))
    with pytest.raises(
            ConversionError, match='Linear has no elliptical version'):
        to_elliptical(nn.Linear(2, 2))
    with pytest.raises(ConversionError, match='batch_first=True only'):
        to_elliptical(MultiheadAttention(C, H, batch_first=False))


def test_bad_calls():
    attn = build('vit')
    with pytest.raises(ValueError, match='same shape'):
        call(attn, torch.randn(B, N, C), torch.randn(B, H, N + 1, D))
    with pytest.raises(TypeError, match=r"self-attention only .*\['key'\]"):
        attn(torch.randn(B, N, C), key=torch.randn(B, N, C))
