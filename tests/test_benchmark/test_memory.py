"""``benchmark/memory.py``: peak RSS, tensor peaks and saved tensors move
with what a step allocates."""
import pytest
import torch
import torch.nn as nn

from mmseg_elliptical.benchmark.memory import (RssPeak, peak_rss_in_child,
                                               saved_tensors_mb,
                                               tensor_peak_mb)

pytestmark = pytest.mark.usefixtures('single_thread')

MIB = 2**20


def keep_large(mib: int):
    """A step that allocates, touches and keeps ``mib`` MiB until it ends."""

    def step():
        big = torch.ones(mib * MIB // 4)
        assert float(big.sum()) == big.numel()

    return step


def test_rss_peak_moves_with_a_large_tensor():
    with RssPeak() as large:
        keep_large(64)()
    with RssPeak() as small:  # after the large one: the mark must reset
        keep_large(1)()
    assert large.measure == small.measure == 'VmHWM'
    assert large.mb - small.mb > 50


def test_rss_peak_in_child_moves_with_a_large_tensor():
    large, measure = peak_rss_in_child(keep_large, 64)
    small, _ = peak_rss_in_child(keep_large, 1)
    assert measure == 'VmHWM'
    assert large - small > 50


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
