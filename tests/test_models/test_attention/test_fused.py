"""``attention/fused.py``: the ops the elliptical layer adds over fused
dot-product (counted by a dispatch hook), the op ``relevance`` against the
composite and ``oracles``, its Triton kernels under ``TRITON_INTERPRET=1``,
and where the composite is used instead (median, compiled, exported)."""
import os
import sys
from collections import Counter

import pytest
import torch
from builders import TINY_MODELS, tiny_family
from oracles import naive_relevance
from processes import run_command
from torch.utils._python_dispatch import TorchDispatchMode

from mmseg_elliptical.models import EllipticalAttentionMixin
from mmseg_elliptical.models.attention import core, fused

B, H, N, D = 2, 3, 24, 8


class OpCounter(TorchDispatchMode):
    """Counts the ops that reach the dispatcher, by name (an op called
    inside another op's kernel is not seen)."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def forward_ops(family: str, grad: bool, **kwargs):
    """The ops of one forward of the tiny ``family`` in eval mode, and its
    number of elliptical layers."""
    model, x = tiny_family(family, dropout=False, **kwargs)
    model.eval()
    layers = sum(
        isinstance(m, EllipticalAttentionMixin) and m.elliptical
        for m in model.modules())
    with torch.set_grad_enabled(grad), OpCounter() as counter:
        model(x)
    return counter.ops, layers


@pytest.mark.parametrize('grad', [False, True], ids=['infer', 'train'])
@pytest.mark.parametrize('family', [f for f in TINY_MODELS if f != 'head'])
def test_ops_added_per_layer(family, grad):
    """At most 3 ops per elliptical layer over the same model with
    dot-product scores (no-grad: the hand-on copy, ``relevance_`` and the
    scaling); with gradient, the estimator is one op too (the rest is q's
    own GEMM, :mod:`.policy`)."""
    ell, layers = forward_ops(family, grad)
    dot, none = forward_ops(family, grad, elliptical_layers=[])
    assert layers > 0 and none == 0
    added = ell - dot
    assert not dot - ell  # nothing of the dot-product forward goes away
    estimator = 'relevance' if grad else 'relevance_'
    assert added[estimator] == layers
    if not grad and family != 'swin':  # swin: its windows to the image
        assert sum(added.values()) <= 3 * layers, added


def test_composite_ops():
    """The composite (the op's CPU kernel) launches 8 ops without copies
    (the explicit estimator of before: 9, and 2 more for the hand-on)."""
    v, v_prev = torch.randn(B, H, N, D), torch.randn(B, H, N, D)
    with torch.no_grad(), OpCounter() as counter:
        core.differentiable_relevance(v, v_prev, overwrite=True)
    assert counter.ops == Counter(
        sub_=1,
        abs_=1,
        mean=1,
        amax=1,
        clamp_min=1,
        div=1,
        le=1,
        masked_fill_=1), counter.ops


@pytest.mark.parametrize('overwrite', [False, True])
def test_op_matches_oracle(overwrite):
    v, v_prev = torch.randn(B, H, N, D), torch.randn(B, H, N, D)
    want = naive_relevance(v, v_prev, eps=1e-6)
    kept = v_prev.clone()
    with OpCounter() as counter:
        m = core.relevance(v, v_prev, overwrite=overwrite)
    assert counter.ops == Counter({'relevance_' * overwrite or 'relevance': 1})
    torch.testing.assert_close(m, want)
    torch.testing.assert_close(v_prev, (v - kept).abs() if overwrite else kept)


def test_guard_near_eps_and_gradient():
    """The guard compares the mean (not the sum) with eps: a head whose
    largest mean change is just below eps gets ones, just above is
    normalised; the gradient through m is finite where it falls back."""
    v = torch.zeros(1, 2, N, D)
    v_prev = v.clone()
    v_prev[0, 0, :, 0] = 0.9e-3
    v_prev[0, 1, :, 0] = 1.1e-3
    v_prev[0, 1, :, 1] = 0.5e-3
    m = core.relevance(v, v_prev, eps=1e-3)
    torch.testing.assert_close(m[0, 0, 0], torch.ones(D))
    torch.testing.assert_close(m, naive_relevance(v, v_prev, eps=1e-3))
    assert 0 < m[0, 1, 0, 1] < 1
    v = torch.randn(1, 2, N, D, requires_grad=True)
    v_prev = v.detach().clone()
    v_prev[0, 1] += 1
    m = core.differentiable_relevance(v, v_prev)
    torch.testing.assert_close(m[0, 0], torch.ones(1, D))
    grad, = torch.autograd.grad((m * torch.randn_like(m)).sum(), v)
    assert grad.isfinite().all() and grad[0, 1].abs().sum() > 0


def test_composite_where_the_op_does_not_apply():
    """Median, and exported (as ``tools/deployment`` does, through
    ``torch.export``): the composite, no op of this package in the graph."""
    v, v_prev = torch.randn(B, H, N, D), torch.randn(B, H, N, D)
    with OpCounter() as counter:
        m = core.relevance(v, v_prev, 'median')
    assert 'relevance' not in counter.ops and counter.ops['median'] == 1
    torch.testing.assert_close(m, naive_relevance(v, v_prev, 'median'))

    class Relevance(torch.nn.Module):

        def forward(self, v, v_prev):
            return core.relevance(v, v_prev)

    program = torch.export.export(Relevance(), (v, v_prev), strict=False)
    ops = {
        str(node.target)
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes if node.op == 'call_function'
    }
    assert 'aten.amax.default' in ops
    assert not [op for op in ops if 'mmseg_elliptical' in op], ops
    assert not fused.tracing()


INTERPRETED = os.environ.get('TRITON_INTERPRET') == '1'


@pytest.mark.slow  # a pytest process of its own
def test_triton_kernels_interpreted():
    """The Triton kernels' test below in a process where Triton interprets
    them on the CPU (``TRITON_INTERPRET=1`` before Triton is imported)."""
    pytest.importorskip('triton')
    out = run_command([
        sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
        f'{__file__}::test_triton_kernels_against_composite'
    ],
                      env=dict(
                          os.environ,
                          TRITON_INTERPRET='1',
                          OMP_NUM_THREADS='1'))
    assert '4 passed' in out.stdout, out.stdout


@pytest.mark.skipif(
    not INTERPRETED, reason='run by test_triton_kernels_interpreted')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('tokens', [24, 130])
def test_triton_kernels_against_composite(dtype, tokens):
    """Strided views of a packed projection (as the layers' v), tokens that
    are no multiple of the chunk, d no power of two, one head without
    change and one whose mean change is just below eps (the guard)."""
    d, eps = 12, 1e-3
    qkv = torch.randn(B, tokens, 3, H, d).to(dtype)
    v = qkv.permute(2, 0, 3, 1, 4)[2]
    v_prev = torch.randn(B, H, tokens, d).to(dtype)
    v_prev[0, 1] = v[0, 1]
    v_prev[1, 2] = v[1, 2]
    v_prev[1, 2, :, 0] += 0.9 * eps
    got = fused.triton_relevance(v, v_prev, eps)
    want = core.differentiable_relevance(v, v_prev, eps=eps)
    assert got.dtype == dtype and got.shape == (B, H, 1, d)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(
        got.float(), naive_relevance(v.float(), v_prev.float(), eps=eps),
        **({} if dtype == torch.float32 else dict(atol=8e-3, rtol=8e-3)))
    torch.testing.assert_close(got[0, 1], torch.ones(1, d, dtype=dtype))
    if dtype == torch.float32:  # bf16 rounds 0.9 * eps away or up
        torch.testing.assert_close(got[1, 2], torch.ones(1, d))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_op_on_cuda_launches_the_two_triton_kernels(dtype):
    """On CUDA with Triton the op is the two kernels (no other launch) and
    equals the composite; the ViT's inference forward adds 3 ops a layer."""
    pytest.importorskip('triton')
    from torch.profiler import ProfilerActivity, profile
    v = torch.randn(B, 3 * H, 1025, 64, device='cuda').to(dtype)[:, ::3]
    v_prev = torch.randn(B, H, 1025, 64, device='cuda').to(dtype)
    want = core.differentiable_relevance(v, v_prev)
    core.relevance(v, v_prev.clone(), overwrite=True)  # compiles
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = core.relevance(v, v_prev, overwrite=True)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == 'CUDA']
    assert len(names) == 2 and '_chunk_sums' in names[0] \
        and '_normalise' in names[1], names
    torch.testing.assert_close(got, want)
    ell, layers = forward_ops('vit', False, device='cuda')
    dot, _ = forward_ops('vit', False, device='cuda', elliptical_layers=[])
    assert sum((ell - dot).values()) <= 3 * layers
