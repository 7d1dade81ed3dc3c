"""The attention kinds of the ViT family (``attention/multihead.py``: ViT and
the Segmenter head, MiT, Twins) against ``oracles.naive_attention``.

Every path of the package (fused with q from its own GEMM and ``q * m`` when
gradients are on, fused with one qkv GEMM and an in-place product under
no-grad, explicit with materialised probabilities) must give the oracle's
outputs, values and gradients.
"""
import pytest
import torch
import torch.nn.functional as F
from checks import check_attention_dropout
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmseg.models.backbones.mit import EfficientMultiheadAttention
from oracles import naive_attention

from mmseg_elliptical.models import (AttentionRecord, EllipticalAttention,
                                     EllipticalEfficientMultiheadAttention,
                                     EllipticalGlobalSubsampledAttention,
                                     to_elliptical)

B, HW, C, H = 2, (4, 6), 24, 3
N = HW[0] * HW[1]
D = C // H
KINDS = ('vit', 'mit', 'twins')


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


def naive(attn, x, v_prev=None, reduction='mean', identity=None):
    return naive_attention(attn, x, v_prev, reduction, identity, hw=HW)


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
        ref, ref_v = naive(attn, x, v_prev, identity=identity)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, ref_v)
    assert not v.requires_grad
    # Without previous values: dot-product attention.
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(
            call(attn, x)[0], naive(attn, x)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('reduction', ['mean', 'median'])
def test_median_reduction(reduction):
    attn = build('vit', relevance_reduction=reduction)
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    torch.testing.assert_close(
        call(attn, x, v_prev)[0],
        naive(attn, x, v_prev, reduction)[0],
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
    ref, _ = naive(attn, x2, v_prev.detach())
    ref.square().sum().backward()
    torch.testing.assert_close(
        grad_w, attn.attn.in_proj_weight.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad_x, x2.grad, atol=1e-4, rtol=1e-4)


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
                            naive(attn, x, v_prev)[0])


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


def test_bad_calls():
    attn = build('vit')
    with pytest.raises(ValueError, match='same shape'):
        call(attn, torch.randn(B, N, C), torch.randn(B, H, N + 1, D))
    with pytest.raises(TypeError, match=r"self-attention only .*\['key'\]"):
        attn(torch.randn(B, N, C), key=torch.randn(B, N, C))


@pytest.mark.parametrize('kwargs, match', [
    (dict(relevance_reduction='max'), 'relevance_reduction'),
    (dict(relevance_eps=0), 'relevance_eps'),
    (dict(relevance_eps=float('nan')), 'relevance_eps'),
])
def test_bad_attention_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        EllipticalAttention(24, 3, **kwargs)
