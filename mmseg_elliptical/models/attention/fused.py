"""The estimator of :mod:`.core` as one op, ``mmseg_elliptical::relevance``:
on CUDA with Triton two kernels (fp32 sums of ``|v - v_prev|`` per chunk of
tokens, then the guard and the normalisation); elsewhere :mod:`.core`'s
composite. Compiled, exported, median or differentiable: the composite.
"""
import os
from typing import Callable

import torch
from torch import Tensor

triton = None
# Triton (the optional extra ``triton``) where it can run: CUDA, or its
# interpreter on the CPU (the tests).
if torch.cuda.is_available() or os.environ.get('TRITON_INTERPRET') == '1':
    try:
        import triton
        import triton.language as tl
    except ImportError:
        pass

#: The ops' namespace in ``torch.ops``.
NAMESPACE = 'mmseg_elliptical'
#: Tokens per program of the first kernel.
CHUNK = 64

if triton is not None:

    @triton.jit
    def _chunk_sums(v, v_prev, sums, N, H, D, chunks, sv_b, sv_h, sv_n, sv_d,
                    sp_b, sp_h, sp_n, sp_d, CHUNK: tl.constexpr,
                    BLOCK_D: tl.constexpr):
        bh, chunk = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        n = chunk * CHUNK + tl.arange(0, CHUNK)[:, None]
        d = tl.arange(0, BLOCK_D)[None, :]
        mask = (n < N) & (d < D)
        x = tl.load(v + b * sv_b + h * sv_h + n * sv_n + d * sv_d, mask=mask)
        y = tl.load(
            v_prev + b * sp_b + h * sp_h + n * sp_n + d * sp_d, mask=mask)
        diff = tl.abs(x.to(tl.float32) - y.to(tl.float32))
        d = tl.arange(0, BLOCK_D)
        tl.store(
            sums + (bh * chunks + chunk) * D + d, tl.sum(diff, 0), mask=d < D)

    @triton.jit
    def _normalise(sums, m, D, chunks, thresh, BLOCK_D: tl.constexpr):
        bh = tl.program_id(0)
        d = tl.arange(0, BLOCK_D)
        total = tl.zeros([BLOCK_D], dtype=tl.float32)
        for chunk in range(chunks):
            total += tl.load(
                sums + (bh * chunks + chunk) * D + d, mask=d < D, other=0.)
        top = tl.max(total, 0)
        out = tl.where(top > thresh, total / tl.maximum(top, thresh), 1.)
        tl.store(m + bh * D + d, out.to(m.dtype.element_ty), mask=d < D)


def triton_relevance(v: Tensor, v_prev: Tensor, eps: float) -> Tensor:
    """The mean estimator ``m`` ``[B, H, 1, d]`` by the two Triton kernels
    (also on CPU tensors under ``TRITON_INTERPRET=1``).

    Args:
        v, v_prev (Tensor): ``[B, H, N, d]``, any strides.
        eps (float): The guard (on the mean, as :mod:`.core`'s).
    """
    B, H, N, D = v.shape
    chunks = triton.cdiv(N, CHUNK)
    sums = torch.empty(B * H, chunks, D, device=v.device, dtype=torch.float32)
    m = torch.empty(B, H, 1, D, device=v.device, dtype=v.dtype)
    block_d = triton.next_power_of_2(D)
    _chunk_sums[(B * H, chunks)](
        v,
        v_prev,
        sums,
        N,
        H,
        D,
        chunks,
        *v.stride(),
        *v_prev.stride(),
        CHUNK=CHUNK,
        BLOCK_D=block_d)
    _normalise[(B * H, )](sums, m, D, chunks, eps * N, BLOCK_D=block_d)
    return m


def fused(composite: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``composite`` (:func:`.core.differentiable_relevance`) routed through
    the op where it applies: the mean, eager (not compiled, traced or
    exported), the same shapes. Defines the ops ``relevance`` and
    ``relevance_`` (may overwrite ``v_prev`` by ``|v - v_prev|``) of
    ``torch.ops.mmseg_elliptical``: ``composite`` by default, the Triton
    kernels on CUDA; no autograd formula (:mod:`.core` calls them under
    no-grad: ``m`` is a constant; ``adaptive_relevance`` calls the
    composite)."""
    for name, schema in (('relevance', 'Tensor v_prev'),
                         ('relevance_', 'Tensor(a!) v_prev')):
        _LIBRARY.define(f'{name}(Tensor v, {schema}, float eps) -> Tensor')
        _LIBRARY.impl(name, _composite_kernel(composite, name[-1] == '_'),
                      'CompositeExplicitAutograd')
        torch.library.register_fake(
            f'{NAMESPACE}::{name}', _fake, lib=_LIBRARY)
        if triton is not None:
            _LIBRARY.impl(name, triton_relevance, 'CUDA')
    ops = torch.ops.mmseg_elliptical
    ops = {False: ops.relevance.default, True: ops.relevance_.default}

    def relevance(v: Tensor,
                  v_prev: Tensor,
                  reduction: str = 'mean',
                  eps: float = 1e-6,
                  overwrite: bool = False) -> Tensor:
        if reduction != 'mean' or v.shape != v_prev.shape or tracing():
            return composite(v, v_prev, reduction, eps, overwrite)
        return ops[overwrite](v, v_prev, eps)

    relevance.__doc__ = composite.__doc__
    return relevance


#: The library of the ops (registered while it lives).
_LIBRARY = torch.library.Library(NAMESPACE, 'DEF')


def _fake(v: Tensor, v_prev: Tensor, eps: float) -> Tensor:
    return v.new_empty(*v.shape[:-2], 1, v.shape[-1])


def _composite_kernel(composite: Callable[..., Tensor], overwrite: bool):
    return lambda v, v_prev, eps: composite(v, v_prev, 'mean', eps, overwrite)


def tracing() -> bool:
    """Compiled, exported or traced: the composite is what is captured."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() \
        or torch.onnx.is_in_onnx_export()
