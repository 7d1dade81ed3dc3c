"""``attention/fused.py``: the ops the elliptical layer adds over fused
dot-product (counted by a dispatch hook), the op ``relevance`` against the
composite and ``oracles``, its Triton kernels under ``TRITON_INTERPRET=1``
(undefined lanes and the memory past the values poisoned), their self-check
and fallback (a stand-in kernel on the CPU), and where the composite is used
instead (median, compiled, exported)."""
import os
import re
import sys
from collections import Counter
from typing import Optional, Sequence, Tuple

import pytest
import torch
from builders import TINY_MODELS, tiny_family
from oracles import naive_relevance
from processes import run_command
from spies import HostReads
from torch import Tensor
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


class Kernel:
    """A stand-in for :func:`fused.triton_relevance` that counts its calls:
    the composite's ``m`` plus ``offset``, times ``scale``; or raising
    ``error`` from call ``fails_from`` on."""

    def __init__(self,
                 offset: float = 0.,
                 scale: float = 1.,
                 error: Optional[Exception] = None,
                 fails_from: int = 1):
        self.offset, self.scale = offset, scale
        self.error, self.fails_from = error, fails_from
        self.calls, self.last = 0, None

    def __call__(self, v, v_prev, eps):
        self.calls += 1
        if self.error is not None and self.calls >= self.fails_from:
            raise self.error
        m = core.differentiable_relevance(v, v_prev, eps=eps)
        self.last = (m + self.offset) * self.scale
        return self.last


class Composite:
    """:func:`core.differentiable_relevance`, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return core.differentiable_relevance(*args)


@pytest.fixture
def logged(monkeypatch):
    """The lines the op's fallback logs (through ``print_log``)."""
    lines = []
    monkeypatch.setattr(fused, 'print_log',
                        lambda text, **kwargs: lines.append(text))
    monkeypatch.delenv(fused.SWITCH, raising=False)
    return lines


def values(dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """Random v and v_prev ``[B, H, N, D]``."""
    v = torch.randn(B, H, N, D, dtype=dtype)
    return v, torch.randn(B, H, N, D, dtype=dtype)


def test_self_check_keeps_a_kernel_that_agrees(logged):
    """A kernel within the tolerance passes the first call's check (one
    value read back, the composite run once) and serves every later call
    alone: no read, no composite. NaN where the composite has NaN agrees."""
    tol = fused.SelfChecked.tolerance(torch.float32)
    kernel, composite = Kernel(offset=tol / 2), Composite()
    checked = fused.SelfChecked(kernel, composite)
    v, v_prev = values()
    for call in range(3):
        with HostReads() as reads:
            got = checked(v, v_prev, 1e-6)
        assert got is kernel.last
        assert reads.ops == (['aten._local_scalar_dense'] if call == 0 else [])
    assert kernel.calls == 3 and composite.calls == 1
    v, v_prev = values(torch.float64)
    v[1, 2, 0, 0] = float('nan')
    got = checked(v, v_prev, 1e-6)
    assert got is kernel.last and got[1, 2].isnan().all()
    assert checked.verdicts == {
        (v.device, torch.float32): True,
        (v.device, torch.float64): True
    }
    assert not logged


@pytest.mark.parametrize(
    'kernel, problem',
    [(lambda: Kernel(scale=0.9), 'differs from the composite'),
     (lambda: Kernel(offset=float('nan')), 'differs from the composite'),
     (lambda: Kernel(error=RuntimeError('no compiler')), 'raised'),
     (lambda: Kernel(error=RuntimeError('no compiler'), fails_from=2),
      'raised')],
    ids=['wrong', 'nan', 'raises', 'raises-later'])
def test_self_check_falls_back_to_the_composite(logged, kernel, problem):
    """A kernel that disagrees at the check or raises (there or later) is
    not called again for that device and dtype: every call returns the
    composite's numbers, and each device and dtype logs one line."""
    kernel = kernel()
    checked = fused.SelfChecked(kernel, core.differentiable_relevance)
    for dtype in (torch.float32, torch.bfloat16):
        v, v_prev = values(dtype)
        for _ in range(3):
            got = checked(v, v_prev, 1e-6)
            assert torch.equal(got, core.differentiable_relevance(v, v_prev))
        assert checked.verdicts[(v.device, dtype)] is False
    kept = v_prev.clone()
    checked(v, v_prev, 1e-6, overwrite=True)  # the composite's own
    torch.testing.assert_close(v_prev, (v - kept).abs())
    assert kernel.calls == 1 + kernel.fails_from  # one per dtype, or 2 + 1
    assert len(logged) == 2, logged
    for line, dtype in zip(logged, ('float32', 'bfloat16')):
        assert problem in line and f'on cpu in torch.{dtype}' in line
        assert 'the composite' in line and '\n' not in line


def test_the_switch_turns_the_kernel_off(logged, monkeypatch):
    """``MMSEG_ELLIPTICAL_TRITON=0``: the composite, without a check or a
    line; the kernel is never called. Any other value: the kernel."""
    monkeypatch.setenv(fused.SWITCH, '0')
    kernel = Kernel()
    checked = fused.SelfChecked(kernel, core.differentiable_relevance)
    v, v_prev = values()
    with HostReads() as reads:
        assert torch.equal(
            checked(v, v_prev, 1e-6), core.differentiable_relevance(v, v_prev))
    kept = v_prev.clone()
    checked(v, v_prev, 1e-6, overwrite=True)
    torch.testing.assert_close(v_prev, (v - kept).abs())
    assert kernel.calls == 0 and not reads.ops and not logged
    monkeypatch.setenv(fused.SWITCH, '1')
    checked = fused.SelfChecked(kernel, core.differentiable_relevance)
    assert checked(v, v_prev, 1e-6) is kernel.last and kernel.calls == 1


INTERPRETED = os.environ.get('TRITON_INTERPRET') == '1'
#: The tests below run in Triton's interpreter, and how many they are.
INTERPRETED_TESTS = ('test_undefined_lanes_are_poison',
                     'test_triton_kernels_against_composite',
                     'test_the_kernels_pass_their_self_check')
INTERPRETED_COUNT = 2 + 4 * 2 * 4 + 2


@pytest.mark.slow  # a pytest process of its own
def test_triton_kernels_interpreted():
    """The Triton kernels' tests below in a process where Triton interprets
    them on the CPU (``TRITON_INTERPRET=1`` before Triton is imported)."""
    pytest.importorskip('triton')
    out = run_command([
        sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
        *(f'{__file__}::{test}' for test in INTERPRETED_TESTS)
    ],
                      env=dict(
                          os.environ,
                          TRITON_INTERPRET='1',
                          OMP_NUM_THREADS='1'))
    assert re.search(rf'(?<!\d){INTERPRETED_COUNT} passed in ', out.stdout), \
        out.stdout


if INTERPRETED:
    import numpy as np
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    @triton.jit
    def _masked_copy(src, dst, n, other: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        if other:
            x = tl.load(src + i, mask=i < n, other=0.)
        else:
            x = tl.load(src + i, mask=i < n)
        tl.store(dst + i, x)


def poison_undefined_lanes(monkeypatch) -> None:
    """Masked-out lanes of a load without ``other`` all bits set (NaN for
    floats) in Triton's interpreter, as undefined lanes may be on a GPU.

    The interpreter cannot show an undefined lane by itself: its
    ``InterpreterBuilder.create_masked_load`` fills them with zeros when a
    load has no ``other`` and reads memory only where the mask is true, so a
    kernel without ``other`` gives the same sums there whatever the memory
    past the valid region holds. This patch is what makes such a kernel
    fail; poisoned memory (:func:`poisoned`) catches a mask that lets a lane
    read past the region."""
    builder = interpreter.InterpreterBuilder
    load = builder.create_masked_load

    def poisoned_load(self, ptrs, mask, other, *args):
        if other is None:
            dtype = ptrs.get_element_ty()
            data = np.empty(ptrs.data.shape, interpreter._get_np_dtype(dtype))
            data.view(np.uint8).fill(0xFF)
            other = interpreter.TensorHandle(data, dtype)
        return load(self, ptrs, mask, other, *args)

    monkeypatch.setattr(builder, 'create_masked_load', poisoned_load)


@pytest.fixture
def undefined_lanes(monkeypatch) -> None:
    """:func:`poison_undefined_lanes` for the test."""
    poison_undefined_lanes(monkeypatch)


def poisoned(data: Tensor, layout: str) -> Tensor:
    """``data`` ``[B, H, N, d]`` as a view into a larger buffer whose other
    elements are NaN: past the last token (by more than a chunk) and, but
    in ``'contiguous'``, past d (by more than the kernel's block) and
    between heads.

    Args:
        data (Tensor): The values.
        layout (str): ``'contiguous'``, ``'padded'`` (tokens then d, each
            padded),
            ``'transposed'`` (d then tokens: token stride 1; every other
            head) or ``'packed'`` (a ``[B, N, 3, H, d]`` projection's v, as
            the layers'; the heads' d interleaved).
    """
    b, h, n, d = data.shape
    pad = fused.CHUNK + 1
    if layout == 'packed':
        buffer = data.new_full((b, n + pad, 3, h, d + pad), float('nan'))
        view = buffer[:, :n, :, :, :d].permute(2, 0, 3, 1, 4)[2]
    elif layout == 'transposed':
        buffer = data.new_full((b, 2 * h, d + pad, n + pad), float('nan'))
        view = buffer[:, ::2, :d, :n].transpose(-2, -1)
    elif layout == 'padded':
        buffer = data.new_full((b, h, n + pad, d + pad), float('nan'))
        view = buffer[:, :, :n, :d]
    else:
        buffer = data.new_full((data.numel() + pad * d, ), float('nan'))
        view = buffer[:data.numel()].view(data.shape)
    view.copy_(data)
    assert buffer.isnan().sum() == buffer.numel() - data.numel()
    return view


@pytest.mark.skipif(
    not INTERPRETED, reason='run by test_triton_kernels_interpreted')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_undefined_lanes_are_poison(dtype, monkeypatch):
    """The interpreter's masked lanes: zeros without ``other``; NaN under
    :func:`poison_undefined_lanes`, unless the load gives ``other``."""
    src, dst = torch.arange(1., 5.).to(dtype), torch.empty(8, dtype=dtype)
    _masked_copy[(1, )](src, dst, 4, other=False, BLOCK=8)
    assert dst[4:].eq(0).all() and torch.equal(dst[:4], src)
    poison_undefined_lanes(monkeypatch)
    _masked_copy[(1, )](src, dst, 4, other=False, BLOCK=8)
    assert dst[4:].isnan().all() and torch.equal(dst[:4], src)
    _masked_copy[(1, )](src, dst, 4, other=True, BLOCK=8)
    assert dst[4:].eq(0).all()


def relevance_inputs(tokens: int,
                     dtype: torch.dtype,
                     layouts: Sequence[str] = ('packed', 'padded'),
                     eps: float = 1e-3) -> Tuple[Tensor, Tensor]:
    """v and v_prev ``[B, H, tokens, 12]`` as :func:`poisoned` views: one
    head without change, one whose mean change is just below ``eps``."""
    v = torch.randn(B, H, tokens, 12).to(dtype)
    v_prev = torch.randn(B, H, tokens, 12).to(dtype)
    v_prev[0, 1] = v[0, 1]
    v_prev[1, 2] = v[1, 2]
    v_prev[1, 2, :, 0] += 0.9 * eps
    return poisoned(v, layouts[0]), poisoned(v_prev, layouts[1])


@pytest.mark.skipif(
    not INTERPRETED, reason='run by test_triton_kernels_interpreted')
@pytest.mark.usefixtures('undefined_lanes')
@pytest.mark.parametrize(
    'layouts', [('packed', 'padded'), ('transposed', 'packed'),
                ('padded', 'transposed'), ('contiguous', 'contiguous')],
    ids='-'.join)
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('tokens', [1, 63, 65, 1025])
def test_triton_kernels_against_composite(tokens, dtype, layouts):
    """Token counts that are no multiple of the chunk (one token, a chunk
    less one, one more, 16 chunks and one), d no power of two, strided and
    transposed views whose memory past the tokens, past d and between heads
    is NaN, undefined lanes NaN (:func:`poison_undefined_lanes`); a head
    without change and one just below eps (the guard). Lanes past d are
    their own sums, never stored: without d's mask they would read past
    the values (on a GPU, maybe past the allocation), but no number here
    would change."""
    eps = 1e-3
    v, v_prev = relevance_inputs(tokens, dtype, layouts, eps)
    got = fused.triton_relevance(v, v_prev, eps)
    want = core.differentiable_relevance(v, v_prev, eps=eps)
    assert got.dtype == dtype and got.shape == (B, H, 1, 12)
    assert got.isfinite().all()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(
        got.float(), naive_relevance(v.float(), v_prev.float(), eps=eps),
        **({} if dtype == torch.float32 else dict(atol=8e-3, rtol=8e-3)))
    torch.testing.assert_close(got[0, 1], torch.ones(1, 12, dtype=dtype))
    if dtype == torch.float32:  # bf16 rounds 0.9 * eps away or up
        torch.testing.assert_close(got[1, 2], torch.ones(1, 12))


@pytest.mark.skipif(
    not INTERPRETED, reason='run by test_triton_kernels_interpreted')
@pytest.mark.usefixtures('undefined_lanes')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_the_kernels_pass_their_self_check(dtype, logged):
    """The op's CUDA kernel is the Triton kernels behind their check
    (:data:`fused.CHECKED`); those pass it within its tolerance and serve."""
    assert isinstance(fused.CHECKED, fused.SelfChecked)
    assert fused.CHECKED.kernel is fused.triton_relevance
    checked = fused.SelfChecked(fused.triton_relevance,
                                core.differentiable_relevance)
    v, v_prev = relevance_inputs(1025, dtype)
    got = checked(v, v_prev, 1e-6)
    assert checked.verdicts == {(v.device, dtype): True} and not logged
    assert torch.equal(got, fused.triton_relevance(v, v_prev, 1e-6))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_op_on_cuda_launches_the_two_triton_kernels(dtype):
    """On CUDA with Triton the op is the two kernels (no other launch, their
    self-check passed) and equals the composite; the ViT's inference
    forward adds 3 ops a layer."""
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
    assert fused.CHECKED.verdicts[(v.device, dtype)] is True  # no fallback
    assert len(names) == 2 and '_chunk_sums' in names[0] \
        and '_normalise' in names[1], names
    torch.testing.assert_close(got, want)
    ell, layers = forward_ops('vit', False, device='cuda')
    dot, _ = forward_ops('vit', False, device='cuda', elliptical_layers=[])
    assert sum((ell - dot).values()) <= 3 * layers
