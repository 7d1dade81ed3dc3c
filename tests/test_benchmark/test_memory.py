"""``benchmark/memory.py``: tensor peaks and saved tensors move with what a
step allocates."""
import pytest
import torch
import torch.nn as nn

from mmseg_elliptical.benchmark.memory import (saved_tensors_mb, step_peak_mb,
                                               tensor_peak_mb)

pytestmark = pytest.mark.usefixtures('single_thread')

MIB = 2**20


def test_tensor_peak_counts_allocations_and_frees():
    kept = []

    def step():
        a = torch.ones(4 * MIB // 4)
        b = a * 2  # 8 MiB live
        del a
        kept.append(torch.cat([b, b]))  # b and the 8 MiB result: 12

    assert tensor_peak_mb(step) == pytest.approx(12, abs=0.01)
    # What existed before the step is not counted; a temporary is.
    assert tensor_peak_mb(lambda: kept[0].sum()) < 0.01
    assert tensor_peak_mb(lambda: (kept[0] + 1).sum()) == \
        pytest.approx(8, abs=0.01)


def test_step_peak_on_the_cpu_is_the_tensor_peak():
    """The one CPU measure, named in the report's ``memory_measure``;
    repeatable to the byte, unlike an RSS peak."""

    def step():
        x = torch.ones(3 * MIB // 4)
        (x * 2).sum()

    peaks = [step_peak_mb(step, 'cpu') for _ in range(3)]
    assert peaks == [(pytest.approx(6, abs=0.01), 'tensors')] * 3
    assert len({mb for mb, _ in peaks}) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_step_peak_on_cuda_is_max_memory_allocated():
    kept = torch.ones(MIB, device='cuda')  # before the step: not counted
    mb, measure = step_peak_mb(
        lambda: (torch.ones(2 * MIB // 4, device='cuda') + kept[0]).sum(),
        'cuda')
    assert measure == 'max_memory_allocated'
    assert mb == pytest.approx(4, abs=0.1)  # the ones and their sum


def test_saved_tensors_move_with_a_large_saved_tensor():
    p = nn.Parameter(torch.ones(()))
    owner = nn.Module()
    owner.p = p
    big, small = torch.randn(4 * MIB // 4), torch.randn(16)
    assert saved_tensors_mb(owner, lambda: (big * p).sum()) == \
        pytest.approx(4, rel=1e-3)
    assert saved_tensors_mb(owner, lambda: (small * p).sum()) < 0.01
    # A parameter saved for its own gradient is not counted.
    owner.w = nn.Parameter(torch.randn(4 * MIB // 4))
    assert saved_tensors_mb(owner, lambda: (owner.w * owner.w).sum()) == 0
