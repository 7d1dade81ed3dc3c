"""What a step launches: CUDA kernels, or top-level ops on the CPU
(``tools/analysis_tools/profile_kernels.py``)."""
import torch
from torch.profiler import ProfilerActivity, profile


def launches(step, cuda: bool, trace: str) -> int:
    """Kernels (CUDA) or top-level ops (CPU) of one ``step``."""
    step()  # warm-up
    activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda
    with profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    if cuda:
        return sum(e.device_type.name == 'CUDA' for e in prof.events())
    return sum(e.cpu_parent is None and '::' in e.name for e in prof.events())
