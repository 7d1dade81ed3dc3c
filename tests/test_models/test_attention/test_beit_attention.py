"""``attention/beit.py``: BEiT's and MAE's elliptical attention against
``oracles.naive_beit_attention``, mmseg's modules, and what it
materialises."""
import pytest
import torch
from checks import check_attention_dropout
from mmseg.models.backbones.beit import BEiTAttention
from mmseg.models.backbones.mae import MAEAttention
from oracles import naive_beit_attention
from spies import ShapeSpy

from mmseg_elliptical.models import (AttentionRecord, EllipticalBEiTAttention,
                                     EllipticalMAEAttention, to_elliptical)

pytestmark = pytest.mark.usefixtures('single_thread')

C, HEADS, GRID = 24, 3, (3, 4)
D = C // HEADS
N = GRID[0] * GRID[1] + 1

KINDS = {
    'beit':
    lambda **kw: EllipticalBEiTAttention(C, HEADS, GRID, **kw),
    'beit-no-bias':
    lambda **kw: EllipticalBEiTAttention(C, HEADS, GRID, bias=False, **kw),
    'mae':
    lambda **kw: EllipticalMAEAttention(C, HEADS, GRID, bias=True, **kw),
}


def build_attention(kind='beit', **kwargs):
    torch.manual_seed(0)
    attn = KINDS[kind](**kwargs)
    with torch.no_grad():  # biases that matter
        for name, p in attn.named_parameters():
            if 'bias' in name:
                p.normal_()
    return attn.eval()


def call(attn, x, v_prev=None):
    with attn.chained(v_prev, keep=True) as chain_call:
        out = attn(x)
    return out, chain_call.values


def naive(attn, x, v_prev=None, scale=None):
    return naive_beit_attention(attn, x, GRID, v_prev, scale)


@pytest.mark.parametrize('kind', sorted(KINDS))
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('batch', [1, 2])
def test_attention_matches_naive(kind, fused, grad, batch):
    attn = build_attention(kind)
    attn.fused_attn = fused
    x = torch.randn(batch, N, C)
    v_prev = torch.randn(batch, HEADS, N, D)
    with torch.set_grad_enabled(grad):
        out, v = call(attn, x, v_prev)
        ref, ref_v = naive(attn, x, v_prev)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, ref_v)
        assert not v.requires_grad
        out, v = call(attn, x)
        torch.testing.assert_close(
            out, naive(attn, x)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('fused', [True, False])
def test_qk_scale_is_honoured(fused):
    attn = build_attention(qk_scale=0.05)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)
    with torch.no_grad():
        torch.testing.assert_close(
            call(attn, x, v_prev)[0],
            naive(attn, x, v_prev, scale=0.05)[0],
            atol=1e-5,
            rtol=1e-5)


@pytest.mark.parametrize('fused', [True, False])
def test_attention_dropout_in_train_mode_only(fused):
    attn = build_attention(attn_drop_rate=0.5)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)
    check_attention_dropout(attn, lambda: call(attn, x, v_prev)[0],
                            naive(attn, x, v_prev)[0])


@pytest.mark.parametrize('kind', ['beit', 'mae'])
@pytest.mark.parametrize('fused', [True, False])
def test_gradients_match_naive_and_m_is_constant(kind, fused):
    attn = build_attention(kind).train()
    attn.fused_attn = fused
    x = torch.randn(2, N, C, requires_grad=True)
    v_prev = torch.randn(2, HEADS, N, D, requires_grad=True)
    call(attn, x, v_prev)[0].square().sum().backward()
    assert v_prev.grad is None
    got = {n: p.grad.clone() for n, p in attn.named_parameters()}
    got_x = x.grad.clone()
    attn.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    naive(attn, x2, v_prev.detach())[0].square().sum().backward()
    expected = {
        'relative_position_bias_table', 'qkv.weight', 'proj.weight',
        'proj.bias'
    }
    expected |= {'q_bias', 'v_bias'} if kind == 'beit' else {'qkv.bias'}
    assert set(got) == expected
    for name, p in attn.named_parameters():
        torch.testing.assert_close(
            got[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)
    torch.testing.assert_close(got_x, x2.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('cls, expected', [
    (BEiTAttention, EllipticalBEiTAttention),
    (MAEAttention, EllipticalMAEAttention),
])
def test_dot_product_mode_equals_mmseg_module(cls, expected):
    torch.manual_seed(0)
    ref = cls(
        C, HEADS, GRID,
        bias='qv_bias' if cls is BEiTAttention else True).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if 'bias' in name:
                p.normal_()
    x = torch.randn(2, N, C)
    out = ref(x)
    attn = to_elliptical(ref)
    assert type(attn) is expected
    torch.testing.assert_close(attn(x), out, atol=1e-5, rtol=1e-5)


def test_explicit_probabilities_give_the_fused_output():
    attn = build_attention()
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)
    with torch.no_grad():
        fused, v = call(attn, x, v_prev)
        attn.fused_attn = False
        attn.attention_record = AttentionRecord()
        call(attn, x, v_prev)
    probs, = attn.attention_record.probs
    assert probs.shape == (2, HEADS, N, N)
    out = (probs @ v).transpose(1, 2).reshape(2, N, C)
    torch.testing.assert_close(attn.proj(out), fused, atol=1e-5, rtol=1e-5)


def test_fused_inference_materialises_no_scores():
    """mmseg's BEiTAttention builds [B, H, N, N] scores; the fused path under
    no-grad builds nothing larger than the [1, H, N, N] bias."""
    torch.manual_seed(0)
    ref = BEiTAttention(C, HEADS, GRID).eval()
    ours = build_attention()
    x, v_prev = torch.randn(2, N, C), torch.randn(2, HEADS, N, D)

    def squares(shapes):
        return [s for s in shapes if s[-2:] == (N, N)]

    with torch.no_grad():
        with ShapeSpy() as spy:
            ref(x)
        assert (2, HEADS, N, N) in squares(spy.shapes)
        for v in (v_prev, None):
            with ShapeSpy() as spy:
                call(ours, x, v)
            assert spy.fused()
            assert max(torch.Size(s).numel()
                       for s in squares(spy.shapes)) == HEADS * N * N
