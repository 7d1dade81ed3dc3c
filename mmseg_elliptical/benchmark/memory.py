"""Memory of one step: the peak of tensor memory, and the saved tensors.

* :func:`step_peak_mb`: the peak of the memory held by the tensors one step
  allocates, above what was there before: on the CPU from the allocations
  and frees ``torch.profiler`` records (:func:`tensor_peak_mb`), on CUDA
  ``torch.cuda.max_memory_allocated`` (:func:`cuda_peak_mb`). Both count
  tensors, not the heap around them, so they are exact and repeatable.
* :func:`saved_tensors_mb`: the storages a forward saves for the backward
  (``saved_tensors_hooks``), each once, parameters excluded: deterministic,
  unlike a peak.
"""
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn

MB = 2**20


def tensor_peak_mb(step: Callable[[], None]) -> float:
    """Peak CPU memory (MiB) held by the tensors one step allocates.

    Every allocation and free of the CPU allocator during the step, in time
    order, as ``torch.profiler`` records them (``profile_memory=True``); the
    peak of their running sum. Tensors that existed before the step
    (parameters, inputs) are not counted.

    torch 2.13 gives these records only through the profiler result's
    ``kineto_results.events()`` (the ``[memory]`` events): the function
    events of its public API carry each operator's net memory, not the peak
    within it, and ``export_memory_timeline`` is deprecated.

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


def step_peak_mb(step: Callable[[], None], device: str) -> Tuple[float, str]:
    """Peak tensor memory of one step on ``device``, and the measure used.

    Args:
        step (callable): The step (run once here).
        device (str): ``'cpu'`` (:func:`tensor_peak_mb`) or a CUDA device
            (:func:`cuda_peak_mb`).

    Returns:
        tuple[float, str]: MiB and ``'tensors'`` (CPU) or
        ``'max_memory_allocated'`` (CUDA).
    """
    if str(device).startswith('cuda'):
        return cuda_peak_mb(step, device), 'max_memory_allocated'
    return tensor_peak_mb(step), 'tensors'


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
