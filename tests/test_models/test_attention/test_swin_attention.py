"""``attention/swin.py``: elliptical (shifted) window attention against
``oracles.naive_window_attention``, mmseg's module, and what it
materialises."""
import math

import pytest
import torch
import torch.nn.functional as F
from checks import check_attention_dropout
from mmseg.models.backbones.swin import ShiftWindowMSA, WindowMSA
from oracles import naive_masked_attention, naive_window_attention
from spies import ShapeSpy

from mmseg_elliptical.models import AttentionRecord, to_elliptical
from mmseg_elliptical.models.attention import (EllipticalShiftWindowMSA,
                                               EllipticalWindowMSA)
from mmseg_elliptical.models.attention.swin import attend_with_window_mask

pytestmark = pytest.mark.usefixtures('single_thread')

C, HEADS, WS = 24, 3, 3
D = C // HEADS
HW = (7, 8)  # padded to 9 x 9: 3 x 3 windows of 3 x 3
L = HW[0] * HW[1]
NW = 9


def build_attention(shift=1, qkv_bias=True, qk_scale=None, **kwargs):
    torch.manual_seed(0)
    attn = EllipticalShiftWindowMSA(
        C,
        HEADS,
        WS,
        shift_size=shift,
        qkv_bias=qkv_bias,
        qk_scale=qk_scale,
        **kwargs)
    with torch.no_grad():  # a bias that matters
        attn.w_msa.relative_position_bias_table.normal_()
        if qkv_bias:
            attn.w_msa.qkv.bias.normal_()
    return attn.eval()


def call(attn, x, v_prev=None, hw=HW):
    with attn.chained(v_prev, keep=True) as chain_call:
        out = attn(x, hw)
    return out, chain_call.values


@pytest.mark.parametrize('shift', [0, 1])
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('batch', [1, 2])
@pytest.mark.parametrize('qkv_bias', [True, False])
def test_window_attention_matches_naive(shift, fused, grad, batch, qkv_bias):
    attn = build_attention(shift, qkv_bias)
    attn.fused_attn = fused
    x = torch.randn(batch, HW[0] * HW[1], C)
    v_prev = torch.randn(batch, HEADS, HW[0] * HW[1], D)
    with torch.set_grad_enabled(grad):
        out, v = call(attn, x, v_prev)
        ref, ref_v = naive_window_attention(attn, x, HW, v_prev)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, ref_v)
        assert not v.requires_grad
        # Without previous values: dot-product attention, values handed on.
        out, v = call(attn, x)
        torch.testing.assert_close(
            out, naive_window_attention(attn, x, HW)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, ref_v)


@pytest.mark.parametrize('fused', [True, False])
def test_qk_scale_is_honoured(fused):
    attn = build_attention(qk_scale=0.05)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, L, C), torch.randn(2, HEADS, L, D)
    with torch.no_grad():
        torch.testing.assert_close(
            call(attn, x, v_prev)[0],
            naive_window_attention(attn, x, HW, v_prev, scale=0.05)[0],
            atol=1e-5,
            rtol=1e-5)


@pytest.mark.parametrize('fused', [True, False])
def test_attention_dropout_in_train_mode_only(fused):
    attn = build_attention(attn_drop_rate=0.5)
    attn.fused_attn = fused
    x, v_prev = torch.randn(2, L, C), torch.randn(2, HEADS, L, D)
    check_attention_dropout(attn, lambda: call(attn, x, v_prev)[0],
                            naive_window_attention(attn, x, HW, v_prev)[0])


@pytest.mark.parametrize('fused', [True, False])
def test_gradients_match_naive_and_m_is_constant(fused):
    attn = build_attention().train()
    attn.fused_attn = fused
    x = torch.randn(2, L, C, requires_grad=True)
    v_prev = torch.randn(2, HEADS, L, D, requires_grad=True)
    out, _ = call(attn, x, v_prev)
    out.square().sum().backward()
    assert v_prev.grad is None
    got = {n: p.grad.clone() for n, p in attn.named_parameters()}
    got_x = x.grad.clone()
    attn.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    naive_window_attention(attn, x2, HW,
                           v_prev.detach())[0].square().sum().backward()
    assert set(got) == {
        'w_msa.relative_position_bias_table', 'w_msa.qkv.weight',
        'w_msa.qkv.bias', 'w_msa.proj.weight', 'w_msa.proj.bias'
    }
    for name, p in attn.named_parameters():
        torch.testing.assert_close(
            got[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)
    torch.testing.assert_close(got_x, x2.grad, atol=1e-4, rtol=1e-4)


def test_dot_product_mode_equals_mmseg_module():
    torch.manual_seed(0)
    ref = ShiftWindowMSA(C, HEADS, WS, shift_size=1).eval()
    with torch.no_grad():
        ref.w_msa.relative_position_bias_table.normal_()
    x = torch.randn(2, L, C)
    expected = ref(x, HW)
    attn = to_elliptical(ref)
    assert type(attn) is EllipticalShiftWindowMSA
    assert type(attn.w_msa) is EllipticalWindowMSA
    torch.testing.assert_close(attn(x, HW), expected, atol=1e-5, rtol=1e-5)
    # The windows are routed back only during a call, also one that fails.
    assert attn.w_msa.window_call is None
    with pytest.raises(AssertionError, match='input feature has wrong size'):
        attn(x, (5, 5))
    assert attn.w_msa.window_call is None
    # w_msa called on its own is mmseg's WindowMSA.
    windows = torch.randn(4, WS * WS, C)
    torch.testing.assert_close(
        attn.w_msa(windows), WindowMSA.forward(attn.w_msa, windows))


def test_explicit_probabilities_are_recorded_per_window():
    attn = build_attention()
    x, v_prev = torch.randn(2, L, C), torch.randn(2, HEADS, L, D)
    attn.fused_attn = False
    attn.attention_record = AttentionRecord()
    with torch.no_grad():
        call(attn, x, v_prev)
    probs, = attn.attention_record.probs
    m, = attn.attention_record.relevance
    assert probs.shape == (2 * NW, HEADS, WS * WS, WS * WS)
    assert m.shape == (2, HEADS, 1, D)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2 * NW, HEADS, 9))


def window_square_tensors(shapes, rows, heads, T):
    """Shapes ``[..., T, T]`` with as many elements as ``[rows, H, T, T]``."""
    return [
        s for s in shapes
        if s[-2:] == (T, T) and torch.Size(s).numel() >= rows * heads * T * T
    ]


@pytest.mark.parametrize('batch', [1, 2])
@pytest.mark.parametrize('shift', [0, 1])
def test_fused_inference_materialises_no_window_scores(batch, shift):
    """mmseg's WindowMSA builds [B * nW, H, Wt, Wt] scores; the fused
    elliptical path under no-grad (with padding) runs SDPA's flash kernel
    and builds no window x window tensor larger than the bias: [1, H, Wt,
    Wt], or one window row's [gw, H, Wt, Wt] in a shifted block."""
    torch.manual_seed(0)
    ref = ShiftWindowMSA(C, HEADS, WS, shift_size=shift).eval()
    ours = build_attention(shift=shift)
    x, v_prev = torch.randn(batch, L, C), torch.randn(batch, HEADS, L, D)
    T = WS * WS
    with torch.no_grad():
        with ShapeSpy() as spy:
            ref(x, HW)
        assert window_square_tensors(spy.shapes, batch * NW, HEADS, T)
        assert not spy.fused()
        for v in (v_prev, None):  # elliptical and dot-product scores
            with ShapeSpy() as spy:
                call(ours, x, v)
            assert spy.fused()
            assert max(
                torch.Size(s).numel() for s in spy.shapes
                if s[-2:] == (T, T)) == (3 if shift else 1) * HEADS * T * T
        ours.fused_attn = False  # the paper's formulation materialises them
        with ShapeSpy() as spy:
            call(ours, x, v_prev)
        assert window_square_tensors(spy.shapes, batch * NW, HEADS, T)


# Swin's shift mask through attend_with_window_mask.


def window_inputs(images: int, windows: int, bias: bool):
    """q, k, v of ``images * windows`` windows of 9 tokens, m, a relative
    position bias ``[1, HEADS, 9, 9]`` and a 0 / -100 mask per window."""
    gen = torch.Generator().manual_seed(0)
    rows, T = images * windows, 9
    q, k, v = (torch.randn(rows, HEADS, T, D, generator=gen) for _ in 'qkv')
    m = torch.rand(rows, HEADS, 1, D, generator=gen)
    b = torch.randn(1, HEADS, T, T, generator=gen) if bias else None
    groups = torch.randint(0, 3, (windows, T), generator=gen)
    mask = torch.where(groups[:, :, None] == groups[:, None, :], 0., -100.)
    return q, k, v, m, b, mask


@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('images', [1, 2])
@pytest.mark.parametrize('bias', [True, False])
def test_attend_with_window_mask_matches_naive(fused, grad, images, bias,
                                               monkeypatch):
    """Swin's shift mask through ``attend_with_window_mask``: the fused and
    the explicit path add ``mask[w]`` to window ``w`` of every image, as the
    oracle."""
    sdpa, calls = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append(kwargs['attn_mask'].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy)
    attn = build_attention().train()
    attn.fused_attn = fused
    windows = 4
    q, k, v, m, b, mask = window_inputs(images, windows, bias)
    if grad and b is not None:
        b.requires_grad_()
    leaves = [t.requires_grad_() for t in (q, k, v)] if grad else []
    with torch.set_grad_enabled(grad):
        out = attend_with_window_mask(attn, q.clone(), k.clone(), v, m, b,
                                      mask)
        uses_sdpa = attn.fused_kernel(q, k, b, 0.)
    assert len(calls) == int(uses_sdpa)
    if uses_sdpa:  # one mask per window of every image, bias included
        assert calls[0] == (images * windows, 1 if b is None else HEADS, 9, 9)
    ref = naive_masked_attention(q, k, v, m, b, window_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    if grad:
        leaves += [b] if b is not None else []
        got = torch.autograd.grad(out.square().sum(), leaves)
        expected = torch.autograd.grad(ref.square().sum(), leaves)
        for a, e in zip(got, expected):
            torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)


def test_attend_window_mask_is_per_window():
    """A mask that differs between windows changes only those windows."""
    attn = build_attention()
    q, k, v, m, b, mask = window_inputs(2, 4, True)
    with torch.no_grad():
        plain = attn.attend(q.clone(), k.clone(), v, m, b)
        mask[1] = 0.  # window 1 of each image unmasked
        out = attend_with_window_mask(attn, q.clone(), k.clone(), v, m, b,
                                      mask)
    unmasked = torch.tensor([1, 5])
    torch.testing.assert_close(out[unmasked], plain[unmasked])
    others = torch.tensor([0, 2, 3, 4, 6, 7])
    assert not torch.allclose(out[others], plain[others], atol=1e-3)


# Swin's window helpers, rewritten so that an exported graph follows the input
# size (deploy), give mmseg's windows exactly.
WINDOWS_WS = 3


@pytest.fixture(scope='module')
def window_modules():
    """mmseg's and our shift-window attention (window 3, shift 1)."""
    torch.manual_seed(0)
    ref = ShiftWindowMSA(8, 2, WINDOWS_WS, shift_size=1).eval()
    new = EllipticalShiftWindowMSA(8, 2, WINDOWS_WS, shift_size=1).eval()
    return ref, new


@pytest.mark.parametrize('batch, h, w', [(1, 3, 3), (2, 6, 9), (3, 12, 3),
                                         (2, 9, 15)])
def test_window_partition_and_reverse_are_mmseg_s(window_modules, batch, h, w):
    ref, new = window_modules
    x = torch.randn(batch, h, w, 8)
    windows = new.window_partition(x)
    assert windows.shape == (batch * (h // WINDOWS_WS) * (w // WINDOWS_WS),
                             WINDOWS_WS, WINDOWS_WS, 8)
    assert torch.equal(windows, ref.window_partition(x))
    assert torch.equal(
        new.window_reverse(windows, h, w), ref.window_reverse(windows, h, w))
    assert torch.equal(new.window_reverse(windows, h, w), x)


@pytest.mark.parametrize('size', [1, 2, 3, 4, 8, 9, 10])
def test_window_grid_counts_mmseg_s_padded_windows(window_modules, size):
    _, new = window_modules
    assert new.window_grid((size, size + 1)) == (math.ceil(size / WINDOWS_WS),
                                                 math.ceil(
                                                     (size + 1) / WINDOWS_WS))
