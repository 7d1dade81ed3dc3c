"""``benchmark/flops.py``: the FLOP handles of attention."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_elliptical.benchmark.flops import count_flops

pytestmark = pytest.mark.usefixtures('single_thread')


class Attention(nn.Module):

    def forward(self, x):

        def part(*shape):
            return x[0, :torch.Size(shape).numel()].reshape(shape)

        return F.scaled_dot_product_attention(
            part(2, 3, 10, 8), part(2, 3, 12, 8), part(2, 3, 12, 4))


def test_attention_flop_handles():
    flops, uncounted = count_flops(Attention(), torch.randn(1, 600))
    # SDPA: B H N M (d + d_v) = 2*3*10*12*(8+4).
    assert flops == 2 * 3 * 10 * 12 * 12
    assert not uncounted
