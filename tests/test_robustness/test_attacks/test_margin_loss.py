"""APGD's margin loss (``apgd-dlr``, issue 54) against a hand computation,
and against a logit temperature that saturates the softmax: the
cross-entropy's input gradient underflows to 0 there, the margin's does
not, so APGD-DLR breaks a model that APGD-MCE cannot move."""
import numpy as np
import pytest
import torch

from mmseg_elliptical.errors import AnalysisError
from mmseg_elliptical.robustness.attacks import apgd, losses


def margin_by_hand(logits: np.ndarray, labels: np.ndarray,
                   ignore: int) -> float:
    """Mean over labelled pixels of ``-(z_y - max_{j!=y} z_j) / (z_1 -
    z_3)`` on the pixels still classified right, one pixel at a time."""
    total, count = 0., 0
    for h in range(labels.shape[0]):
        for w in range(labels.shape[1]):
            y = labels[h, w]
            if y == ignore:
                continue
            count += 1
            z = logits[:, h, w]
            if z.argmax() != y:
                continue
            ranked = sorted(z, reverse=True)
            other = max(v for c, v in enumerate(z) if c != y)
            total += -(z[y] - other) / (ranked[0] - ranked[2] + 1e-12)
    return total / max(count, 1)


def test_the_margin_loss_against_the_hand_written_one():
    torch.manual_seed(0)
    logits = torch.randn(5, 6, 7, dtype=torch.float64) * 3
    labels = torch.randint(0, 5, (6, 7))
    labels[0] = 255
    labels[1] = logits[:, 1].argmax(0)  # a row classified right
    got = losses.masked_margin(logits, labels, 255)
    assert got.item() == pytest.approx(
        margin_by_hand(logits.numpy(), labels.numpy(), 255), rel=1e-9)
    assert got.item() < 0  # the right pixels' margins are positive
    # the same under any logit scale
    assert losses.masked_margin(logits * 1e4, labels, 255).item() == \
        pytest.approx(got.item(), rel=1e-9)
    assert losses.LOSSES['apgd-dlr'] is losses.masked_margin
    with pytest.raises(AnalysisError, match='3 or more classes'):
        losses.masked_margin(logits[:2], labels.clamp(0, 1), 255)


#: A logit temperature that saturates float32's softmax.
HOT = 1e4


def linear(weight: torch.Tensor, temperature: float):
    """A per-pixel linear classifier of 0-255 images, its logits scaled."""

    def forward(xs):
        return [
            temperature * torch.einsum('ck,khw->chw', weight, x / 255 - 0.5)
            for x in xs
        ]

    return forward


@pytest.fixture(scope='module')
def toy():
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(4, 3, generator=gen)
    x0 = [torch.rand(3, 8, 8, generator=gen) * 255 for _ in range(3)]
    labels = []
    with torch.no_grad():  # the prediction, where its margin is clear
        for lg in linear(weight, 1.)(x0):
            top = lg.topk(2, dim=0).values
            labels.append(
                torch.where(top[0] - top[1] > 0.05, lg.argmax(0), 255))
    return weight, x0, labels


def test_a_hot_softmax_zeroes_the_cross_entropy_gradient_not_the_margin(toy):
    weight, x0, labels = toy
    x = x0[0].clone().requires_grad_()
    for name, zero in (('apgd-mce', True), ('apgd-dlr', False)):
        (logits, ) = linear(weight, HOT)([x])
        (grad, ) = torch.autograd.grad(
            losses.LOSSES[name](logits, labels[0], 255), x)
        assert bool((grad == 0).all()) is zero, name


def accuracy(weight, xs, labels):
    with torch.no_grad():
        return np.mean([
            losses.pixel_accuracy(lg, y, 255)
            for lg, y in zip(linear(weight, 1.)(xs), labels)
        ])


def test_apgd_dlr_breaks_what_apgd_mce_cannot_move(toy):
    """Every labelled pixel starts right; at eps 32 levels APGD-DLR takes
    most of them wrong under the hot softmax, where APGD-MCE sees zero
    gradients and stays at the start (no random start here)."""
    weight, x0, labels = toy
    got = {}
    for name in ('apgd-mce', 'apgd-dlr'):
        xs, _ = apgd.apgd(
            linear(weight, HOT), x0, labels, lambda j, r: x0[j].clone(), name,
            'linf', 32., 20)
        assert all((x - o).abs().max() <= 32 + 1e-4 for x, o in zip(xs, x0))
        got[name] = accuracy(weight, xs, labels)
    assert got['apgd-mce'] == 1.
    assert got['apgd-dlr'] < 0.5, got
