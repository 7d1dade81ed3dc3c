"""The estimator of :mod:`.core` as one op, ``mmseg_elliptical::relevance``:
on CUDA with Triton two kernels (fp32 sums of ``|v - v_prev|`` per chunk of
tokens, then the guard and the normalisation), checked once against
:mod:`.core`'s composite per device and dtype (:class:`SelfChecked`);
elsewhere the composite. Compiled, exported, median or differentiable: the
composite.
"""
import logging
import os
from typing import Callable, Dict, Optional, Tuple

import torch
from mmengine.logging import print_log
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
#: ``MMSEG_ELLIPTICAL_TRITON=0``: the composite serves CUDA too.
SWITCH = 'MMSEG_ELLIPTICAL_TRITON'

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
        # Masked lanes are 0 (undefined on a GPU without ``other``): summed.
        x = tl.load(
            v + b * sv_b + h * sv_h + n * sv_n + d * sv_d, mask=mask, other=0.)
        y = tl.load(
            v_prev + b * sp_b + h * sp_h + n * sp_n + d * sp_d,
            mask=mask,
            other=0.)
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


#: ``(device, dtype)``: the key of one self-check.
Key = Tuple[torch.device, torch.dtype]


class SelfChecked:
    """``kernel`` (:func:`triton_relevance`) where it gives ``composite``'s
    numbers, else ``composite``: never a failed or a wrong step.

    The first call for a device and dtype runs both on its inputs and
    compares them (the one host synchronisation, exempt from
    ``torch.cuda.set_sync_debug_mode``). A kernel that raises there (cannot
    compile or launch) or disagrees beyond :meth:`tolerance` hands that
    device and dtype to ``composite`` for good, with one logged warning, and
    that call returns ``composite``'s numbers; one that raises later too.
    After the check a call is a dictionary look-up and the kernel: nothing
    waits for the device. ``MMSEG_ELLIPTICAL_TRITON=0`` (read at that first
    call) gives ``composite`` without a check. Inside a CUDA graph's capture
    (no synchronisation allowed) ``composite`` serves until a call outside.

    Args:
        kernel (callable): ``kernel(v, v_prev, eps)``, the mean estimator.
        composite (callable): :func:`.core.differentiable_relevance`.
        name (str): The kernel's name in the warning.
    """

    def __init__(self,
                 kernel: Callable[[Tensor, Tensor, float], Tensor],
                 composite: Callable[..., Tensor],
                 name: str = 'Triton') -> None:
        self.kernel, self.composite, self.name = kernel, composite, name
        #: The verdicts so far: True, the kernel; False, the composite.
        self.verdicts: Dict[Key, bool] = {}

    @staticmethod
    def tolerance(dtype: torch.dtype) -> float:
        """Absolute and relative tolerance of ``m`` in ``[0, 1]``: two steps
        of ``dtype``'s precision, at least 1e-4 (the sums' orders differ)."""
        return max(1e-4, 2 * torch.finfo(dtype).eps)

    def __call__(self,
                 v: Tensor,
                 v_prev: Tensor,
                 eps: float,
                 overwrite: bool = False) -> Tensor:
        """The op's kernel: ``m`` ``[B, H, 1, d]``.

        Args:
            v, v_prev (Tensor): ``[B, H, N, d]``, any strides.
            eps (float): The guard.
            overwrite (bool): The composite may overwrite ``v_prev``.
        """
        key = (v.device, v.dtype)
        verdict = self.verdicts.get(key)
        if verdict is None:
            return self.check(key, v, v_prev, eps, overwrite)
        if verdict:
            try:
                return self.kernel(v, v_prev, eps)
            except Exception as error:
                self.fall_back(key, f'raised {error!r}')
        return self.composite(v, v_prev, 'mean', eps, overwrite)

    def check(self, key: Key, v: Tensor, v_prev: Tensor, eps: float,
              overwrite: bool) -> Tensor:
        """The first call for ``key`` (arguments as :meth:`__call__`'s): the
        kernel's ``m`` if it agrees with the composite's (which keeps
        ``v_prev`` then), else the composite's."""
        off = os.environ.get(SWITCH) == '0'
        if off:
            self.verdicts[key] = False
        if off or (v.is_cuda and torch.cuda.is_current_stream_capturing()):
            return self.composite(v, v_prev, 'mean', eps, overwrite)
        want = self.composite(v, v_prev, 'mean', eps, False)
        try:
            got = self.kernel(v, v_prev, eps)
            problem = self.disagreement(got, want)
        except Exception as error:
            problem = f'raised {error!r}'
        if problem:
            self.fall_back(key, problem)
            return want
        self.verdicts[key] = True
        return got

    def disagreement(self, got: Tensor, want: Tensor) -> Optional[str]:
        """Why ``got`` is not ``want`` (None: it is: within :meth:`tolerance`
        everywhere, NaN exactly where ``want`` is NaN). Reads one number
        back from the device."""
        if got.shape != want.shape or got.dtype != want.dtype:
            return (f'gave {got.dtype} {tuple(got.shape)} instead of '
                    f'{want.dtype} {tuple(want.shape)}')
        tol = self.tolerance(want.dtype)
        got, want = got.float(), want.float()
        # The error in tolerances (isclose's |got - want| <= atol + rtol
        # |want|): <= 1 where close; inf where one alone is NaN.
        worst = ((got - want).abs() / (tol + tol * want.abs())).masked_fill_(
            got.isnan() & want.isnan(), 0).nan_to_num_(float('inf'))
        mode = torch.cuda.get_sync_debug_mode() if got.is_cuda else 0
        if mode:  # the one synchronisation this check makes
            torch.cuda.set_sync_debug_mode(0)
        try:
            worst = worst.amax().item()
        finally:
            if mode:
                torch.cuda.set_sync_debug_mode(mode)
        if worst <= 1:
            return None
        return (f'differs from the composite by up to {worst:.3g} times the '
                f'tolerance ({tol:.3g} + {tol:.3g} |m|)')

    def fall_back(self, key: Key, problem: str) -> None:
        """Hand ``key`` to the composite; log it once."""
        if self.verdicts.get(key) is False:
            return
        self.verdicts[key] = False
        device, dtype = key
        print_log(
            f'mmseg_elliptical::relevance: the {self.name} kernel {problem} '
            f'on {device} in {dtype}; the composite '
            '(core.differentiable_relevance) serves it from now on.',
            logger='current',
            level=logging.WARNING)


def fused(composite: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``composite`` (:func:`.core.differentiable_relevance`) routed through
    the op where it applies: the mean, eager (not compiled, traced or
    exported), the same shapes. Defines the ops ``relevance`` and
    ``relevance_`` (may overwrite ``v_prev`` by ``|v - v_prev|``) of
    ``torch.ops.mmseg_elliptical``: ``composite`` by default, on CUDA the
    Triton kernels where they pass their check (:class:`SelfChecked`, one
    for both ops, :data:`CHECKED`); no autograd formula (:mod:`.core` calls
    them under no-grad: ``m`` is a constant; ``adaptive_relevance`` calls
    the composite)."""
    global CHECKED
    if triton is not None:
        CHECKED = SelfChecked(triton_relevance, composite)
    for name, schema in (('relevance', 'Tensor v_prev'),
                         ('relevance_', 'Tensor(a!) v_prev')):
        overwrite = name[-1] == '_'
        _LIBRARY.define(f'{name}(Tensor v, {schema}, float eps) -> Tensor')
        _LIBRARY.impl(name, _composite_kernel(composite, overwrite),
                      'CompositeExplicitAutograd')
        torch.library.register_fake(
            f'{NAMESPACE}::{name}', _fake, lib=_LIBRARY)
        if CHECKED is not None:
            _LIBRARY.impl(name, _checked_kernel(CHECKED, overwrite), 'CUDA')
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
#: The ops' CUDA kernel where Triton is there (set by :func:`fused`).
CHECKED: Optional[SelfChecked] = None


def _fake(v: Tensor, v_prev: Tensor, eps: float) -> Tensor:
    return v.new_empty(*v.shape[:-2], 1, v.shape[-1])


def _composite_kernel(composite: Callable[..., Tensor], overwrite: bool):
    return lambda v, v_prev, eps: composite(v, v_prev, 'mean', eps, overwrite)


def _checked_kernel(checked: SelfChecked, overwrite: bool):
    return lambda v, v_prev, eps: checked(v, v_prev, eps, overwrite)


def tracing() -> bool:
    """Compiled, exported or traced: the composite is what is captured."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing() \
        or torch.onnx.is_in_onnx_export()
