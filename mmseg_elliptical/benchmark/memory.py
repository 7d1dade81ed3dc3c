"""Memory of one step: peak RSS, CUDA peak, tensors saved for the backward.

* :class:`RssPeak`: the CPU peak RSS increase of what runs inside it. Freed
  heap is given back to the OS first (``malloc_trim``), the kernel's
  high-water mark is reset (``/proc/self/clear_refs``) and ``VmHWM`` minus
  the RSS before is read (``ru_maxrss`` where the mark cannot be reset).
* :func:`peak_rss_in_child`: the same in a fresh process, isolated from the
  heap of everything else the benchmark built.
* :func:`tensor_peak_mb`: the peak of the CPU memory held by tensors
  allocated during the step, from every allocation and free the profiler
  records (``profile_memory``): exact and repeatable, like CUDA's
  ``max_memory_allocated``, where an RSS peak also moves with the heap.
* :func:`cuda_peak_mb`: ``torch.cuda.max_memory_allocated`` above what was
  allocated before the step.
* :func:`saved_tensors_mb`: the storages a forward saves for the backward
  (``saved_tensors_hooks``), each once, parameters excluded: deterministic,
  unlike a peak.
"""
import ctypes
import gc
import multiprocessing as mp
import resource
from queue import Empty
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn

MB = 2**20


def proc_status_kb(key: str) -> Optional[int]:
    """A ``kB`` field of ``/proc/self/status`` (Linux), or None."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_rss_peak() -> bool:
    """Reset the kernel's RSS high-water mark ``VmHWM`` (Linux >= 4.0)."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Give freed heap back to the OS (glibc), for a clean baseline."""
    gc.collect()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass


class RssPeak:
    """Context manager: peak RSS increase (MiB) of what runs inside.

    Example::

        with RssPeak() as peak:
            step()
        print(peak.mb, peak.measure)

    Attributes:
        mb (float): The increase, set on exit.
        measure (str): ``'VmHWM'`` (resettable high-water mark) or
            ``'ru_maxrss'`` (process peak; an upper bound when the block is
            the largest thing the process did).
    """

    def __enter__(self) -> 'RssPeak':
        trim_heap()
        self.before = proc_status_kb('VmRSS') or 0
        self.measure = 'VmHWM' if reset_rss_peak() and proc_status_kb(
            'VmHWM') is not None else 'ru_maxrss'
        self.mb = float('nan')
        return self

    def __exit__(self, *exc) -> None:
        if self.measure == 'VmHWM':
            peak = proc_status_kb('VmHWM')
        else:  # kB on Linux
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.mb = (peak - self.before) / 1024


def tensor_peak_mb(step: Callable[[], None]) -> float:
    """Peak CPU memory (MiB) held by the tensors one step allocates.

    Every allocation and free of the CPU allocator during the step, in time
    order, from ``torch.profiler`` (``profile_memory=True``); the peak of
    their running sum. Tensors that existed before the step (parameters,
    inputs) are not counted.

    Args:
        step (callable): The step (run once here).

    Returns:
        float: MiB.
    """
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        step()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in p.profiler.kineto_results.events()
        if e.name() == '[memory]' and e.device_type().name == 'CPU')
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak / MB


def cuda_peak_mb(step: Callable[[], None], device=None) -> float:
    """Peak allocated CUDA memory (MiB) of one step above what was there.

    Args:
        step (callable): The step.
        device (str or torch.device, optional): The CUDA device; defaults to
            the current one.

    Returns:
        float: MiB.
    """
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / MB


def step_peak_mb(step: Callable[[], None],
                 device: str,
                 tensors: bool = False) -> Tuple[float, str]:
    """Peak memory of one step in this process, and the measure used.

    Args:
        step (callable): The step (run once here).
        device (str): ``'cpu'`` (peak RSS increase) or a CUDA device.
        tensors (bool): On the CPU, the peak of tensor memory
            (:func:`tensor_peak_mb`) instead of RSS. Defaults to False.

    Returns:
        tuple[float, str]: MiB and ``'max_memory_allocated'``,
        ``'tensors'``, ``'VmHWM'`` or ``'ru_maxrss'``.
    """
    if str(device).startswith('cuda'):
        return cuda_peak_mb(step, device), 'max_memory_allocated'
    if tensors:
        return tensor_peak_mb(step), 'tensors'
    with RssPeak() as peak:
        step()
    return peak.mb, peak.measure


def saved_tensors_mb(model: nn.Module, forward: Callable[[], object]) -> float:
    """MiB of the tensors a forward keeps for the backward.

    Args:
        model (nn.Module): Its parameters are not counted.
        forward (callable): Runs the forward (with gradients on).

    Returns:
        float: MiB of distinct storages saved.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.enable_grad(), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(storages.values()) / MB


def _child(queue, prepare: Callable, args: tuple) -> None:
    """Child process: ``step = prepare(*args)``, then its peak RSS."""
    try:
        step = prepare(*args)
        with RssPeak() as peak:
            step()
        queue.put((peak.mb, peak.measure))
    except BaseException as e:  # report, do not hang the parent
        queue.put(e)


Prepare = Callable[..., Callable[[], None]]
Peak = Tuple[float, str]


def peak_rss_in_child(prepare: Prepare,
                      *args,
                      preload: Tuple[str, ...] = ('torch', )) -> Peak:
    """Peak RSS increase of one step, in a fresh child process.

    Args:
        prepare (callable): Picklable (a module-level function); in the
            child, ``prepare(*args)`` builds what is needed and returns the
            step, warmed up.
        *args: Its picklable arguments.
        preload (tuple[str]): Modules the forkserver imports once for every
            child. Defaults to ``('torch', )``.

    Returns:
        tuple[float, str]: MiB and the measure (see :class:`RssPeak`).
    """
    method = 'forkserver' if 'forkserver' in mp.get_all_start_methods() \
        else 'spawn'
    ctx = mp.get_context(method)
    if method == 'forkserver':
        ctx.set_forkserver_preload(list(preload))
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, prepare, args))
    proc.start()
    while True:
        try:
            result = queue.get(timeout=1.)
            break
        except Empty:
            if not proc.is_alive():
                raise RuntimeError(
                    f'The memory measurement\'s child process exited with '
                    f'code {proc.exitcode} before reporting (killed for '
                    'memory?).')
    proc.join()
    if isinstance(result, BaseException):
        raise result
    return result
