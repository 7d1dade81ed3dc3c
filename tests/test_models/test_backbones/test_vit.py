"""``backbones/vit.py``: EllipticalVisionTransformer against mmseg's class
and ``oracles.naive_vit_forward``."""
import pytest
import torch
from builders import VIT_ARCH, images
from checks import (check_compiled, check_dot_product_equals_mmseg,
                    check_interchange, check_matches_naive)
from mmseg.models.backbones import VisionTransformer
from oracles import naive_vit_forward

from mmseg_elliptical.models import EllipticalVisionTransformer

pytestmark = pytest.mark.usefixtures('single_thread')

ARCH = VIT_ARCH


def naive(model, x):
    return [naive_vit_forward(model, x)]


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(out_indices=[1, 3], final_norm=True),
    dict(output_cls_token=True),
    dict(with_cls_token=False),
    dict(out_origin=True, pre_norm=True, patch_norm=True, qkv_bias=False),
])
def test_dot_product_mode_equals_mmseg(kwargs):
    check_dot_product_equals_mmseg(VisionTransformer,
                                   EllipticalVisionTransformer,
                                   torch.randn(2, 3, 32, 32),
                                   **dict(ARCH, **kwargs))


def test_elliptical_forward_matches_naive():
    torch.manual_seed(0)
    model = EllipticalVisionTransformer(**ARCH).eval()
    assert model.elliptical_layers == (1, 2, 3)
    assert [layer.attn.elliptical
            for layer in model.layers] == [False, True, True, True]
    check_matches_naive(
        model,
        naive,
        VisionTransformer(**ARCH),
        torch.randn(2, 3, 32, 32),
        atol=1e-5)


def test_elliptical_layers_subset():
    torch.manual_seed(0)
    model = EllipticalVisionTransformer(elliptical_layers=[3, 2], **ARCH)
    assert model.elliptical_layers == (2, 3)
    assert [layer.attn.elliptical
            for layer in model.layers] == [False, False, True, True]
    model.eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            model(x)[0], naive_vit_forward(model, x), atol=1e-5, rtol=1e-5)


def test_checkpoints_load_both_ways_strictly():
    torch.manual_seed(0)
    check_interchange(
        VisionTransformer(**ARCH), EllipticalVisionTransformer(**ARCH))


def test_pos_embed_resize_and_odd_inputs():
    torch.manual_seed(0)
    model = EllipticalVisionTransformer(**ARCH).eval()
    out = model(torch.randn(1, 3, 48, 40))[0]
    assert out.shape == (1, 24, 6, 5)
    assert torch.isfinite(out).all()


def test_train_eval_return_self_and_norm_eval():
    model = EllipticalVisionTransformer(norm_eval=True, **ARCH)
    assert model.train() is model
    assert not model.layers[0].norm1.training  # LayerNorms frozen
    assert model.eval() is model and not model.training


def test_frozen_exclude():
    model = EllipticalVisionTransformer(frozen_exclude=['pos_embed'], **ARCH)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ['pos_embed']


@pytest.mark.slow  # torch.compile
def test_torch_compile_matches_eager():
    """Train mode with gradients, and inference (its own scaling path)."""
    torch.manual_seed(0)
    model = EllipticalVisionTransformer(**ARCH)
    model.init_weights()
    check_compiled(model, images(4, 32))
