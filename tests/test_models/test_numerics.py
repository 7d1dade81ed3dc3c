"""Numerics of a whole segmentor: degenerate images, odd sizes, bf16
autocast, with_cp.

Every case runs the elliptical backbone alone and the full segmentor
(``EncoderDecoder`` with ``EllipticalMaskTransformerHead``: the tiny demo
model) forward and backward, and checks that features, losses and every
gradient are finite.
"""
import math
from typing import Dict, Tuple

import pytest
import torch
from builders import build_segmentor, seg_samples
from checks import check_bf16, check_with_cp, grads
from torch import Tensor

pytestmark = pytest.mark.usefixtures('single_thread')

NUM_CLASSES = 5
PATCH = 8


def total_loss(model: torch.nn.Module, x: Tensor) -> Tensor:
    """Sum of the segmentor's training losses on ``x``."""
    losses = model.loss(x, seg_samples(x.shape[0], *x.shape[-2:], NUM_CLASSES))
    return sum(v for k, v in losses.items() if 'loss' in k)


def assert_all_finite(tensors: Dict[str, Tensor]) -> None:
    bad = [n for n, t in tensors.items() if not torch.isfinite(t).all()]
    assert not bad, f'non-finite values in {bad}'


# Images as the model sees them after the data preprocessor would have run;
# none is normalised, so they stress the patch embedding and the LayerNorms.
DEGENERATE = {
    'constant':
    lambda: torch.full((2, 3, 64, 64), 0.5),
    'all_zero':
    lambda: torch.zeros(2, 3, 64, 64),
    'large_constant':
    lambda: torch.full((2, 3, 64, 64), 1e4),
    'large_random':
    lambda: torch.rand(
        2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 1e4,
}


@pytest.fixture(scope='module')
def segmentor() -> torch.nn.Module:
    return build_segmentor()


@pytest.fixture(scope='module')
def segmentor_median() -> torch.nn.Module:
    return build_segmentor(**{'model.backbone.relevance_reduction': 'median'})


@pytest.mark.parametrize('kind', sorted(DEGENERATE))
@pytest.mark.parametrize('reduction', ['mean', 'median'])
def test_degenerate_images_finite(kind: str, reduction: str, segmentor,
                                  segmentor_median) -> None:
    model = segmentor if reduction == 'mean' else segmentor_median
    x = DEGENERATE[kind]().requires_grad_()

    # Backbone alone: features and gradients (w.r.t. input and weights).
    model.zero_grad()
    feats = model.backbone(x)
    assert_all_finite({f'feat{i}': f for i, f in enumerate(feats)})
    sum(f.pow(2).mean() for f in feats).backward()
    assert_all_finite({'input': x.grad, **grads(model.backbone)})

    # Full segmentor: loss and every gradient.
    model.zero_grad()
    loss = total_loss(model, x.detach())
    assert torch.isfinite(loss)
    loss.backward()
    g = grads(model)
    assert_all_finite(g)
    # Both the backbone's attention and the head's got gradients.
    assert 'backbone.layers.2.attn.attn.in_proj_weight' in g
    assert 'decode_head.layers.1.attn.attn.in_proj_weight' in g


@pytest.mark.parametrize('hw', [(61, 75), (65, 63), (5, 7)])
def test_sizes_not_multiple_of_patch(hw: Tuple[int, int], segmentor) -> None:
    h, w = hw
    x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(0))
    segmentor.zero_grad()
    feat = segmentor.backbone(x)[-1]
    # mmseg's PatchEmbed pads the bottom/right corner to a whole patch.
    assert feat.shape[-2:] == (math.ceil(h / PATCH), math.ceil(w / PATCH))
    assert torch.isfinite(feat).all()
    loss = total_loss(segmentor, x)
    assert torch.isfinite(loss)
    assert_all_finite(grads(segmentor))
    # Inference resizes the logits back to the image size.
    segmentor.eval()
    try:
        with torch.no_grad():
            out = segmentor.predict(x, seg_samples(2, h, w, NUM_CLASSES))
    finally:
        segmentor.train()
    assert out[0].seg_logits.data.shape == (NUM_CLASSES, h, w)
    assert torch.isfinite(out[0].seg_logits.data).all()


@pytest.mark.parametrize('scale', [1.0, 1e4])
def test_bf16_autocast(scale: float, segmentor) -> None:
    """The logits and their gradients (``check_bf16`` on the segmentor's
    ``_forward``), the backbone's features, the loss and every gradient of
    the training step are finite under bf16 autocast."""
    x = torch.randn(
        2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * scale
    segmentor.zero_grad()
    check_bf16(segmentor, x, 'autocast', output=lambda m, x: m._forward(x))
    segmentor.zero_grad()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        feat = segmentor.backbone(x)[-1]
        loss = total_loss(segmentor, x)
    assert torch.isfinite(feat).all()
    assert torch.isfinite(loss)
    loss.backward()
    assert_all_finite(grads(segmentor))


def test_with_cp_gradients_equal() -> None:
    """The segmentor with a checkpointed backbone: less saved for the
    backward, the same loss and gradients; without gradients (inference)
    the checkpointed path is skipped and gives the same logits."""

    def build(with_cp):
        return build_segmentor(**{'model.backbone.with_cp': with_cp})

    plain, ckpt = check_with_cp(
        build,
        torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)),
        loss=total_loss,
        max_saved=None)
    assert all(layer.with_cp for layer in ckpt.backbone.layers)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        _eval_forward(ckpt, x), _eval_forward(plain, x), rtol=0, atol=1e-6)


def _eval_forward(model: torch.nn.Module, x: Tensor) -> Tensor:
    """Logits of ``model`` in eval mode without gradients."""
    model.eval()
    with torch.no_grad():
        return model._forward(x)
