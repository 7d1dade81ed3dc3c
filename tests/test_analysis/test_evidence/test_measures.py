"""The statistics of ``m`` and the attention entropy against loops."""
import math

import pytest
import torch
from evidence_oracles import entropy_by_hand, relevance_statistics_by_hand

from mmseg_elliptical.analysis import attention_entropy, relevance_statistics


def test_relevance_statistics_against_loops():
    m = torch.rand(3, 2, 1, 5, generator=torch.Generator().manual_seed(0))
    got = relevance_statistics(m)
    want = relevance_statistics_by_hand(m)
    for key in ('mean', 'min', 'effective'):
        assert got[key].tolist() == pytest.approx(want[key], rel=1e-12), key


def test_effective_coordinates_extremes():
    ones = relevance_statistics(torch.ones(1, 2, 1, 8))
    assert ones['effective'].item() == pytest.approx(1.0)  # dot product
    one_hot = torch.zeros(1, 1, 1, 8)
    one_hot[..., 3] = 1
    assert relevance_statistics(one_hot)['effective'].item() == \
        pytest.approx(1 / 8)
    with pytest.raises(ValueError, match=r'\[B, H, 1, d\]'):
        relevance_statistics(torch.ones(2, 8))


def test_attention_entropy_against_loops():
    probs = torch.rand(2, 3, 4, 6, generator=torch.Generator().manual_seed(1))
    probs[0, 1, 2] = 0
    probs[0, 1, 2, 4] = 1  # a one-hot row: 0 ln 0 counts 0
    probs = probs / probs.sum(-1, keepdim=True)
    assert attention_entropy(probs).tolist() == pytest.approx(
        entropy_by_hand(probs), rel=1e-12)
    uniform = torch.full((1, 2, 3, 7), 1 / 7)
    assert attention_entropy(uniform).item() == pytest.approx(math.log(7))
    with pytest.raises(ValueError, match=r'\[B, H, N, M\]'):
        attention_entropy(torch.ones(3, 3))
