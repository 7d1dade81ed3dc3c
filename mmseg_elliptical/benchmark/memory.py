"""Memory of one step: the peak of tensor memory (exact and repeatable),
and the saved tensors (docs/benchmark.md)."""
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

MB = 2**20


def tensor_peak_mb(step: Callable[[], None]) -> float:
    """Peak CPU memory (MiB) held by the tensors one step allocates: the
    running sum of the profiler's allocations and frees.

    The ``[memory]`` events of ``kineto_results`` are torch's only record of
    them (the public function events carry net memory per operator).
    """
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
    """Peak allocated CUDA memory (MiB) of one step above what was there
    (``device``: default the current one)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / MB


def step_peak_mb(step: Callable[[], None], device: str) -> Tuple[float, str]:
    """Peak tensor memory (MiB) of one step on ``device``, and the measure
    used: ``'tensors'`` (CPU) or ``'max_memory_allocated'`` (CUDA)."""
    if str(device).startswith('cuda'):
        return cuda_peak_mb(step, device), 'max_memory_allocated'
    return tensor_peak_mb(step), 'tensors'


def saved_tensors_mb(model: nn.Module, forward: Callable[[], object]) -> float:
    """MiB of the distinct storages a ``forward()`` keeps for the backward,
    ``model``'s parameters excluded."""
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
