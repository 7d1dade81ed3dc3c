"""Numerics: degenerate images, odd sizes, bf16 autocast, with_cp.

Every case runs the elliptical backbone alone and the full segmentor
(``EncoderDecoder`` with ``EllipticalMaskTransformerHead``) forward and
backward, and checks that features, losses and every gradient are finite.
"""
import math
from typing import Dict, List, Tuple

import pytest
import torch
from conftest import DEMO_ELLIPTICAL, grads, tiny_config
from mmengine.structures import PixelData
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample
from mmseg.utils import register_all_modules
from torch import Tensor

pytestmark = pytest.mark.usefixtures('single_thread')

NUM_CLASSES = 5
PATCH = 8


def build_segmentor(**backbone) -> torch.nn.Module:
    """The tiny elliptical demo segmentor (3 + 2 layers, 48 dims), seeded.

    Args:
        **backbone: Overrides of the backbone config.

    Returns:
        torch.nn.Module: The initialised ``EncoderDecoder`` in train mode.
    """
    register_all_modules(init_default_scope=True)
    cfg = tiny_config(DEMO_ELLIPTICAL, 'unused', 'unused').model
    cfg.backbone.update(backbone)
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    model.init_weights()
    model.train()
    return model


def seg_samples(batch: int, h: int, w: int) -> List[SegDataSample]:
    """Data samples with random ground truth of size ``h x w``."""
    gen = torch.Generator().manual_seed(1)
    samples = []
    for _ in range(batch):
        sample = SegDataSample()
        sample.gt_sem_seg = PixelData(
            data=torch.randint(0, NUM_CLASSES, (1, h, w), generator=gen))
        sample.set_metainfo(
            dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w)))
        samples.append(sample)
    return samples


def total_loss(model: torch.nn.Module, x: Tensor) -> Tensor:
    """Sum of the segmentor's training losses on ``x``."""
    losses = model.loss(x, seg_samples(x.shape[0], *x.shape[-2:]))
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
    return build_segmentor(relevance_reduction='median')


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
            out = segmentor.predict(x, seg_samples(2, h, w))
    finally:
        segmentor.train()
    assert out[0].seg_logits.data.shape == (NUM_CLASSES, h, w)
    assert torch.isfinite(out[0].seg_logits.data).all()


@pytest.mark.parametrize('scale', [1.0, 1e4])
def test_bf16_autocast(scale: float, segmentor) -> None:
    x = torch.randn(
        2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * scale
    with torch.no_grad():
        ref = segmentor._forward(x)
    segmentor.zero_grad()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        feat = segmentor.backbone(x)[-1]
        logits = segmentor._forward(x)
        loss = total_loss(segmentor, x)
    assert torch.isfinite(feat).all()
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    loss.backward()
    assert_all_finite(grads(segmentor))
    # bf16 keeps ~3 significant digits: the logits differ from fp32's (so
    # autocast was in effect) but stay close.
    err = (logits.float() - ref).abs().max() / ref.abs().max()
    assert 0 < err < 0.1, f'bf16 logits deviate from fp32 by {err:.3g} (rel.)'


def test_with_cp_gradients_equal() -> None:
    plain = build_segmentor()
    ckpt = build_segmentor(with_cp=True)
    assert all(layer.with_cp for layer in ckpt.backbone.layers)
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    losses = []
    for model in (plain, ckpt):
        model.zero_grad()
        loss = total_loss(model, x)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=1e-6)
    g_plain, g_ckpt = grads(plain), grads(ckpt)
    assert g_plain.keys() == g_ckpt.keys()
    for name in g_plain:
        torch.testing.assert_close(
            g_ckpt[name], g_plain[name], rtol=0, atol=1e-6, msg=name)
    # Without gradients (inference) the checkpointed path is skipped.
    torch.testing.assert_close(
        _eval_forward(ckpt, x), _eval_forward(plain, x), rtol=0, atol=1e-6)


def _eval_forward(model: torch.nn.Module, x: Tensor) -> Tensor:
    """Logits of ``model`` in eval mode without gradients."""
    model.eval()
    with torch.no_grad():
        return model._forward(x)
