"""``attention/core.py`` and ``policy.py``: the estimator ``m``
(``relevance``), where ``m`` meets q or k (``scaling``), which path runs
(``fused_kernel``) and the attention itself (``attend``), against
``oracles``."""
import threading
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from builders import TINY_MODELS, VIT_ARCH, images, tiny_family
from checks import outputs_loss
from oracles import naive_masked_attention, naive_relevance

from mmseg_elliptical.models import (EllipticalAttention,
                                     EllipticalAttentionMixin,
                                     EllipticalVisionTransformer,
                                     adaptive_relevance)
from mmseg_elliptical.models.attention import policy
from mmseg_elliptical.models.attention.core import relevance
from mmseg_elliptical.models.attention.policy import (EXPLICIT_MAX_KEYS,
                                                      Scaling, scaling)

B, N, H, D = 2, 24, 3, 8
C = H * D

# ---------------------------------------------------------------- relevance


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


def test_relevance_overwrite_and_median():
    v, v_prev = torch.randn(B, H, N, D), torch.randn(B, H, N, D)
    expected = naive_relevance(v, v_prev, 'median')
    kept = v_prev.clone()
    torch.testing.assert_close(relevance(v, v_prev, 'median'), expected)
    assert torch.equal(v_prev, kept)  # not overwritten by default
    torch.testing.assert_close(
        relevance(v, v_prev, overwrite=True), naive_relevance(v, kept))
    torch.testing.assert_close(v_prev, (v - kept).abs())  # |v - v_prev|


def test_adaptive_relevance_differentiates_through_m():
    """With ``adaptive`` (``adaptive_relevance``) the gradient reaches the
    previous values through ``m`` (as the oracle's) and the handed-on values
    keep their graph; without, ``m`` is a constant and the values are
    detached."""
    attn = elliptical_vit_attention()
    x = torch.randn(B, N, C)
    v_prev = torch.randn(B, H, N, D, requires_grad=True)
    w, b = attn.attn.in_proj_weight, attn.attn.in_proj_bias

    def run():
        with attn.chained(v_prev, keep=True) as call:
            out = attn.attend(*attn.project(x, x, w, b))
        return out, call.values

    with adaptive_relevance(attn):
        out, values = run()
    assert values.requires_grad
    got, = torch.autograd.grad(out.square().sum(), v_prev)
    q, k, v = (x @ w.T + b).view(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
    ref = naive_masked_attention(q, k, v, naive_relevance(v, v_prev))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    want, = torch.autograd.grad(ref.square().sum(), v_prev)
    assert want.abs().sum() > 0
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert attn.adaptive is False
    for switched_off in (nullcontext(), adaptive_relevance(attn, on=False)):
        with switched_off:
            out, values = run()
        assert not values.requires_grad
        assert torch.autograd.grad(
            out.square().sum(), v_prev, allow_unused=True) == (None, )


def vit():
    """A tiny elliptical ViT from seed 0, in eval mode (no random draws)."""
    torch.manual_seed(0)
    model = EllipticalVisionTransformer(**VIT_ARCH)
    model.init_weights()
    return model.eval()


def attentions(model):
    return [
        m for m in model.modules() if isinstance(m, EllipticalAttentionMixin)
    ]


def test_adaptive_relevance_switches_one_model_and_restores_it():
    """Only the given model's attentions switch, nested switches restore
    the outer mode, and an error inside restores the mode before."""
    model, other = vit(), vit()
    assert len(attentions(model)) == 4
    with pytest.raises(RuntimeError, match='inside'):
        with adaptive_relevance(model) as switched:
            assert switched is model
            assert all(a.adaptive for a in attentions(model))
            assert not any(a.adaptive for a in attentions(other))
            with adaptive_relevance(model, on=False):
                assert not any(a.adaptive for a in attentions(model))
            assert all(a.adaptive for a in attentions(model))
            raise RuntimeError('inside')
    assert not any(a.adaptive for a in attentions(model))
    with pytest.raises(TypeError, match='takes the model'):
        with adaptive_relevance(True):
            pass


def input_gradient(model, x, wrapped=False):
    """The gradient of ``model``'s loss (``wrapped``: ``model`` gives it)
    w.r.t. ``x``."""
    leaf = x.clone().requires_grad_(True)
    (model(leaf) if wrapped else outputs_loss(model(leaf))).backward()
    return leaf.grad


def test_adaptive_is_per_model_in_threads_at_once():
    """A plain and an adaptive forward + backward of two copies, in two
    threads that both switch before either runs and switch back after both
    are done: each gets the input gradient it gets alone."""
    x = images(0)
    plain, adaptive = vit(), vit()
    alone = {False: input_gradient(plain, x)}
    with adaptive_relevance(adaptive):
        alone[True] = input_gradient(adaptive, x)
    assert not torch.allclose(alone[True], alone[False])
    barrier, got, errors = threading.Barrier(2, timeout=120), {}, []

    def run(model, on):
        try:
            with adaptive_relevance(model, on):
                barrier.wait()  # both switched
                got[on] = input_gradient(model, x)
                barrier.wait()  # both done
        except BaseException as e:  # raised again below
            errors.append(e)
            barrier.abort()

    threads = [
        threading.Thread(target=run, args=(m, on))
        for m, on in ((plain, False), (adaptive, True))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for on in (False, True):
        torch.testing.assert_close(got[on], alone[on], rtol=1e-6, atol=0)


@pytest.mark.parametrize('family', list(TINY_MODELS))
def test_adaptive_input_gradient_is_the_forwards_slope(family):
    """In float64, through every family's value chain, the adaptive input
    gradient gives the forward's slope along a random direction (a central
    difference; ``m``'s mean accumulates in fp32, hence the tolerance);
    the plain one (``m`` constant) misses it by several times more."""
    model, x = tiny_family(family, dropout=False)
    model, wrapped = model.double().eval(), isinstance(x, list)
    x = (x[0] if wrapped else x).double()
    d = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    d, h = d.double(), 1e-3

    def loss(z):
        return outputs_loss(model([z] if wrapped else z))

    with torch.no_grad():
        slope = ((loss(x + h * d) - loss(x - h * d)) / (2 * h)).item()
    plain = input_gradient(loss, x, wrapped=True)
    with adaptive_relevance(model):
        adaptive = input_gradient(loss, x, wrapped=True)
    miss = {
        name: abs((g * d).sum().item() / slope - 1)
        for name, g in (('plain', plain), ('adaptive', adaptive))
    }
    assert miss['adaptive'] < 1e-4, miss
    assert miss['plain'] > 4 * miss['adaptive'], miss


# ------------------------------------------------------------------ scaling


def plan(queries: int, keys: int, grad: bool, compiled: bool) -> Scaling:
    """What :func:`scaling` decides, eagerly or inside a compiled graph."""

    def decide(x):
        return x + 1, scaling(queries, keys)

    with torch.set_grad_enabled(grad):
        if not compiled:
            return decide(torch.zeros(1))[1]
        torch._dynamo.reset()
        try:
            fn = torch.compile(decide, backend='eager', fullgraph=True)
            return fn(torch.zeros(1))[1]
        finally:
            torch._dynamo.reset()


@pytest.mark.parametrize('grad', [True, False], ids=['grad', 'no_grad'])
@pytest.mark.parametrize(
    'compiled',
    [False, pytest.param(True, marks=pytest.mark.slow)],  # torch.compile
    ids=['eager', 'compiled'])
@pytest.mark.parametrize('queries, keys', [(16, 4), (16, 16), (4, 16)])
def test_scaling_decision(queries, keys, grad, compiled):
    """Keys when there are fewer keys than queries without grad; q from its
    own GEMM when q is scaled with grad or compiled; in place only eagerly
    without grad."""
    s = plan(queries, keys, grad, compiled)
    assert s.keys == (not grad and keys < queries)
    assert s.own_gemm == (not s.keys and (grad or compiled))
    assert s.in_place == (not grad and not compiled)


@pytest.mark.parametrize('keys', [False, True])
@pytest.mark.parametrize('in_place', [False, True])
def test_scaling_apply(keys, in_place):
    q, k = torch.randn(B, H, N, D), torch.randn(B, H, N // 2, D)
    m = torch.rand(B, H, 1, D)
    q0, k0 = q.clone(), k.clone()
    q1, k1 = Scaling(keys, False, in_place).apply(q, k, m)
    torch.testing.assert_close(q1 @ k1.transpose(-2, -1),
                               (q0 * m) @ k0.transpose(-2, -1))
    scaled, other, kept = (k1, q1, q) if keys else (q1, k1, k)
    assert other is kept  # the other one is handed on untouched
    assert (scaled is (k if keys else q)) == in_place
    assert torch.equal(q, q0 * m if in_place and not keys else q0)
    assert torch.equal(k, k0 * m if in_place and keys else k0)


def elliptical_vit_attention():
    torch.manual_seed(0)
    return EllipticalAttention(C, H).eval()


@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('elliptical', [True, False])
def test_project_follows_the_plan(grad, elliptical, monkeypatch):
    """Self-attention projects q, k, v with one packed GEMM, but for q's own
    GEMM where the plan says so (elliptical scores only)."""
    attn = elliptical_vit_attention()
    linear, calls = F.linear, []

    def spy(x, weight, bias=None):
        calls.append(weight.shape[0])
        return linear(x, weight, bias)

    monkeypatch.setattr(F, 'linear', spy)
    x = torch.randn(B, N, C)
    v_prev = torch.randn(B, H, N, D) if elliptical else None
    with torch.set_grad_enabled(grad), attn.chained(v_prev):
        q, k, v, m = attn.project(x, x, attn.attn.in_proj_weight,
                                  attn.attn.in_proj_bias)
    own = elliptical and grad  # eager: q's own GEMM with grad only
    assert calls == ([2 * C, C] if own else [3 * C])
    assert (m is not None) == elliptical
    w, b = attn.attn.in_proj_weight, attn.attn.in_proj_bias
    expected = (x @ w.T + b).view(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
    for got, ref in zip((q, k, v), expected):
        torch.testing.assert_close(got, ref)


@pytest.mark.parametrize('grad', [True, False])
@pytest.mark.parametrize('keys', [N, N // 4], ids=['equal', 'fewer'])
def test_attend_scales_as_planned(grad, keys):
    """Eagerly without grad the fused path multiplies k (fewer keys) or q in
    place; with grad nothing it was given changes. The output is the
    oracle's either way."""
    attn = elliptical_vit_attention()
    q, k, v = (torch.randn(B, H, n, D) for n in (N, keys, keys))
    m = torch.rand(B, H, 1, D)
    q0, k0 = q.clone(), k.clone()
    with torch.set_grad_enabled(grad):
        out = attn.attend(q, k, v, m)
    torch.testing.assert_close(
        out, naive_masked_attention(q0, k0, v, m), atol=1e-5, rtol=1e-5)
    in_place_keys = not grad and keys < N
    assert torch.equal(q, q0 * m if not grad and not in_place_keys else q0)
    assert torch.equal(k, k0 * m if in_place_keys else k0)


# ------------------------------------------------------------- fused_kernel

BIAS, GRAD_BIAS, NONE = 'bias', 'grad_bias', None


@pytest.mark.parametrize(
    'device, grad, training, dropout, bias, keys, fused', [
        ('cpu', True, True, 0., GRAD_BIAS, EXPLICIT_MAX_KEYS, False),
        ('cpu', True, False, 0., GRAD_BIAS, 16, False),
        ('cpu', True, True, 0., GRAD_BIAS, EXPLICIT_MAX_KEYS + 1, True),
        ('cpu', True, True, 0.1, NONE, 16, False),
        ('cpu', True, True, 0.1, NONE, EXPLICIT_MAX_KEYS + 1, True),
        ('cpu', True, False, 0.1, NONE, 16, True),
        ('cpu', True, True, 0., BIAS, 16, True),
        ('cpu', True, True, 0., NONE, 16, True),
        ('cpu', False, True, 0.1, GRAD_BIAS, 16, True),
        ('meta', True, True, 0.1, GRAD_BIAS, 16, True),
    ],
    ids=[
        'train-grad_bias-max_keys', 'eval-grad_bias', 'grad_bias-many_keys',
        'train-dropout', 'dropout-many_keys', 'eval-dropout', 'bias_no_grad',
        'no_bias', 'no_grad', 'not_cpu'
    ])
def test_fused_kernel(device, grad, training, dropout, bias, keys, fused):
    """Explicit on the CPU in training with a bias that needs a gradient or
    dropout (on the probabilities, in train mode), and at most
    ``EXPLICIT_MAX_KEYS`` keys; fused otherwise, and never with
    ``fused_attn=False``."""
    attn = elliptical_vit_attention().train(training)
    q = torch.zeros(1, H, 4, D, device=device)
    k = torch.zeros(1, H, keys, D, device=device)
    b = None if bias is None else torch.zeros(
        1, H, 4, keys, device=device, requires_grad=bias == GRAD_BIAS)
    with torch.set_grad_enabled(grad):
        assert attn.fused_kernel(q, k, b, dropout) is fused
        attn.fused_attn = False
        assert attn.fused_kernel(q, k, b, dropout) is False


@pytest.mark.parametrize('keys', [32, EXPLICIT_MAX_KEYS + 1])
def test_attend_runs_the_chosen_path(keys, monkeypatch):
    """In training with a bias that needs a gradient, few keys take the
    explicit path, many SDPA; both give the oracle's output and
    gradients."""
    sdpa, calls = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy)
    attn = elliptical_vit_attention().train()
    q = torch.randn(1, 1, 4, D, requires_grad=True)
    k, v = (torch.randn(1, 1, keys, D, requires_grad=True) for _ in 'kv')
    bias = torch.randn(1, 1, 4, keys, requires_grad=True)
    m = torch.rand(1, 1, 1, D)
    out = attn.attend(q, k, v, m, bias=bias)
    assert bool(calls) == (keys > EXPLICIT_MAX_KEYS)
    inputs = (q, k, v, bias)
    got = torch.autograd.grad(out.square().sum(), inputs)
    ref = naive_masked_attention(q, k, v, m, bias)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(got, torch.autograd.grad(ref.square().sum(), inputs)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_explicit_max_keys_is_what_fused_kernel_reads(monkeypatch):
    """The threshold is read at call time (the Swin test forces SDPA's
    math kernel by lowering it)."""
    attn = elliptical_vit_attention().train()
    q, k = torch.zeros(1, H, 4, D), torch.zeros(1, H, 16, D)
    bias = torch.zeros(1, H, 4, 16, requires_grad=True)
    assert not attn.fused_kernel(q, k, bias, 0.)
    monkeypatch.setattr(policy, 'EXPLICIT_MAX_KEYS', 8)
    assert attn.fused_kernel(q, k, bias, 0.)
