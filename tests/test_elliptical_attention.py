"""EllipticalAttention against a naive, materialised implementation."""
import pytest
import torch
import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import MultiheadAttention

from mmseg_elliptical.models import EllipticalAttention, relevance

B, N, C, H = 2, 17, 24, 3
D = C // H


def naive_relevance(v, v_prev, reduction='mean'):
    """m per (image, head) written with explicit loops over heads."""
    out = torch.empty(v.shape[0], v.shape[1], 1, v.shape[-1])
    for b in range(v.shape[0]):
        for h in range(v.shape[1]):
            diff = (v[b, h] - v_prev[b, h]).abs()  # [N, d]
            m = diff.mean(0) if reduction == 'mean' else diff.median(0).values
            out[b, h, 0] = m / m.max()
    return out


def naive_attention(attn, x, v_prev=None, reduction='mean'):
    """softmax((q diag(m)) k^T / sqrt(d)) v with the N x N matrix, as the paper."""
    w, bias = attn.attn.in_proj_weight, attn.attn.in_proj_bias
    q, k, v = (x @ w.T + bias).chunk(3, dim=-1)

    def heads(t):
        return t.reshape(B, N, H, D).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    if v_prev is not None:
        m = naive_relevance(v.detach(), v_prev, reduction)
        q = q @ torch.diag_embed(m[:, :, 0])
    scores = q @ k.transpose(-2, -1) / D**0.5
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, C)
    return x + attn.attn.out_proj(out), v


@pytest.fixture
def attn():
    torch.manual_seed(0)
    module = EllipticalAttention(C, H)
    with torch.no_grad():  # non-trivial biases
        module.attn.in_proj_bias.normal_()
    return module.eval()


@pytest.mark.parametrize('reduction', ['mean', 'median'])
def test_matches_naive(attn, reduction):
    attn.reduction = reduction
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    out, v = attn(x, v_prev=v_prev)
    ref_out, ref_v = naive_attention(attn, x, v_prev, reduction)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, ref_v)
    assert not v.requires_grad


def test_elliptical_differs_from_dot_product(attn):
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    assert not torch.allclose(attn(x, v_prev=v_prev)[0], attn(x)[0], atol=1e-4)
    attn.elliptical = False  # v_prev is then ignored
    torch.testing.assert_close(attn(x, v_prev=v_prev)[0], attn(x)[0])


def test_dot_product_equals_mmcv(attn):
    mmcv_attn = MultiheadAttention(C, H, batch_first=True).eval()
    mmcv_attn.load_state_dict(attn.state_dict(), strict=True)
    x = torch.randn(B, N, C)
    identity = torch.randn(B, N, C)
    torch.testing.assert_close(
        attn(x, identity=identity)[0],
        mmcv_attn(x, identity=identity),
        atol=1e-5,
        rtol=1e-5)


def test_relevance_properties():
    v, v_prev = torch.randn(B, H, N, D), torch.randn(B, H, N, D)
    m = relevance(v, v_prev)
    assert m.shape == (B, H, 1, D)
    torch.testing.assert_close(m.amax(-1), torch.ones(B, H, 1))
    assert (m >= 0).all()
    torch.testing.assert_close(m, naive_relevance(v, v_prev))
    # Scale invariance: delta in the paper cancels.
    torch.testing.assert_close(relevance(3 * v, 3 * v_prev), m)


def test_relevance_guard_no_nan():
    v = torch.randn(B, H, N, D)
    m = relevance(v, v.clone())  # no change at all: max = 0
    assert torch.isfinite(m).all()
    torch.testing.assert_close(m, torch.ones(B, H, 1, D))
    # One head without change, one with: only the first falls back.
    v_prev = v.clone()
    v_prev[:, 1] += torch.randn(B, N, D)
    m = relevance(v, v_prev)
    torch.testing.assert_close(m[:, 0], torch.ones(B, 1, D))
    torch.testing.assert_close(m[:, 1], naive_relevance(v, v_prev)[:, 1])


def test_identical_values_give_dot_product(attn):
    """max = 0 falls back to m = 1: the layer then scores like dot-product."""
    x = torch.randn(B, N, C)
    _, v = attn(x)
    torch.testing.assert_close(attn(x, v_prev=v)[0], attn(x)[0])


def test_gradients_reach_qkv_but_not_m(attn):
    attn.train()
    x = torch.randn(B, N, C, requires_grad=True)
    v_prev = torch.randn(B, H, N, D, requires_grad=True)
    out, _ = attn(x, v_prev=v_prev)
    out.square().sum().backward()
    assert v_prev.grad is None  # m is a constant for autograd
    grad_w = attn.attn.in_proj_weight.grad.clone()
    grad_x = x.grad.clone()
    for rows in (slice(0, C), slice(C, 2 * C), slice(2 * C, 3 * C)):
        assert grad_w[rows].abs().sum() > 0  # q, k and v all get gradient

    # Same gradient as the naive computation with m detached.
    attn.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    ref, _ = naive_attention(attn, x2, v_prev.detach())
    ref.square().sum().backward()
    torch.testing.assert_close(grad_w, attn.attn.in_proj_weight.grad,
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad_x, x2.grad, atol=1e-4, rtol=1e-4)


def test_uses_fused_sdpa(attn, monkeypatch):
    """The elliptical path goes through scaled_dot_product_attention."""
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy)
    attn(torch.randn(B, N, C), v_prev=torch.randn(B, H, N, D))
    assert calls == [(B, H, N, D)]


def test_attention_weights_rows_sum_to_one(attn):
    x, v_prev = torch.randn(B, N, C), torch.randn(B, H, N, D)
    w = attn.attention_weights(x, v_prev)
    assert w.shape == (B, H, N, N)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, N))


def test_from_mmcv_shares_parameters_and_rng():
    torch.manual_seed(0)
    mmcv_attn = MultiheadAttention(C, H, attn_drop=0.1, batch_first=True)
    state = torch.get_rng_state()
    new = EllipticalAttention.from_mmcv(mmcv_attn, reduction='median')
    assert torch.equal(torch.get_rng_state(), state)
    assert new.attn is mmcv_attn.attn
    assert new.reduction == 'median' and new.attn.dropout == 0.1
    assert list(new.state_dict()) == list(mmcv_attn.state_dict())


@pytest.mark.parametrize('kwargs, match', [
    (dict(reduction='max'), 'relevance_reduction'),
    (dict(eps=0), 'relevance_eps'),
    (dict(eps=float('nan')), 'relevance_eps'),
    (dict(batch_first=False), 'batch_first'),
    (dict(num_heads=5), 'divisible'),
])
def test_bad_arguments(kwargs, match):
    args = dict(embed_dims=C, num_heads=H)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        EllipticalAttention(**args)


def test_mismatched_previous_values(attn):
    with pytest.raises(ValueError, match='same shape'):
        attn(torch.randn(B, N, C), v_prev=torch.randn(B, H, N + 1, D))
