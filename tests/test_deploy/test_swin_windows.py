"""Swin's window helpers, rewritten so that an exported graph follows the
input size, give mmseg's windows exactly (eager, against mmseg's own
``ShiftWindowMSA.window_partition`` / ``window_reverse``)."""
import math
import pytest
import torch
from mmseg.models.backbones.swin import ShiftWindowMSA

from mmseg_elliptical.models.attention import EllipticalShiftWindowMSA

WS = 3


@pytest.fixture(scope='module')
def modules():
    torch.manual_seed(0)
    ref = ShiftWindowMSA(8, 2, WS, shift_size=1).eval()
    new = EllipticalShiftWindowMSA(8, 2, WS, shift_size=1).eval()
    return ref, new


@pytest.mark.parametrize('batch, h, w', [(1, 3, 3), (2, 6, 9), (3, 12, 3),
                                         (2, 9, 15)])
def test_window_partition_and_reverse_are_mmseg_s(modules, batch, h, w):
    ref, new = modules
    x = torch.randn(batch, h, w, 8)
    windows = new.window_partition(x)
    assert windows.shape == (batch * (h // WS) * (w // WS), WS, WS, 8)
    assert torch.equal(windows, ref.window_partition(x))
    assert torch.equal(
        new.window_reverse(windows, h, w), ref.window_reverse(windows, h, w))
    assert torch.equal(new.window_reverse(windows, h, w), x)


@pytest.mark.parametrize('size', [1, 2, 3, 4, 8, 9, 10])
def test_window_grid_counts_mmseg_s_padded_windows(modules, size):
    _, new = modules
    assert new.window_grid(
        (size, size + 1)) == (math.ceil(size / WS), math.ceil((size + 1) / WS))
