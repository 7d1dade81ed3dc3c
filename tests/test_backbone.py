"""EllipticalVisionTransformer: mmseg compatibility and the threaded values."""
import pytest
import torch
from conftest import build_pair, check_interchange
from mmseg.models.backbones import VisionTransformer
from test_elliptical_attention import naive_relevance

from mmseg_elliptical.models import EllipticalVisionTransformer

ARCH = dict(
    img_size=32,
    patch_size=8,
    embed_dims=24,
    num_heads=3,
    num_layers=4,
    mlp_ratio=2)


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(out_indices=[1, 3], final_norm=True),
    dict(output_cls_token=True),
    dict(with_cls_token=False),
    dict(out_origin=True, pre_norm=True, patch_norm=True, qkv_bias=False),
])
def test_dot_product_mode_equals_mmseg(kwargs):
    ref, ours = build_pair(VisionTransformer, EllipticalVisionTransformer,
                           **dict(ARCH, **kwargs))
    # Same seed, same initial weights: the conversion consumes no RNG.
    for (k1, p1), (k2, p2) in zip(ref.state_dict().items(),
                                  ours.state_dict().items()):
        assert k1 == k2 and torch.equal(p1, p2)
    ref.eval(), ours.eval()
    x = torch.randn(2, 3, 32, 32)
    for a, b in zip(ref(x), ours(x)):
        pairs = zip(*(t if isinstance(t, list) else [t] for t in (a, b)))
        for ta, tb in pairs:
            torch.testing.assert_close(ta, tb, atol=1e-5, rtol=1e-5)


def naive_forward(model, x):
    """The method of DEVELOPERS.md written out layer by layer."""
    tokens, hw = model.patch_embed(x)
    tokens = torch.cat((model.cls_token.expand(x.shape[0], -1, -1), tokens), 1)
    tokens = tokens + model.pos_embed
    v_prev = None
    H, C = model.layers[0].attn.num_heads, tokens.shape[-1]
    for i, layer in enumerate(model.layers):
        y = layer.norm1(tokens)
        q, k, v = (y @ layer.attn.attn.in_proj_weight.T +
                   layer.attn.attn.in_proj_bias).chunk(3, -1)
        q, k, v = (
            t.reshape(*t.shape[:2], H, C // H).transpose(1, 2)
            for t in (q, k, v))
        if i in model.elliptical_layers:
            q = q * naive_relevance(v, v_prev)
        a = (q @ k.transpose(-2, -1) / (C // H)**0.5).softmax(-1) @ v
        a = a.transpose(1, 2).reshape(tokens.shape)
        tokens = tokens + layer.attn.attn.out_proj(a)
        tokens = layer.ffn(layer.norm2(tokens), identity=tokens)
        v_prev = v
    return tokens[:, 1:].transpose(1, 2).reshape(x.shape[0], C, *hw)


def test_elliptical_forward_matches_naive():
    torch.manual_seed(0)
    model = EllipticalVisionTransformer(**ARCH).eval()
    assert model.elliptical_layers == (1, 2, 3)
    assert [layer.attn.elliptical
            for layer in model.layers] == [False, True, True, True]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            model(x)[0], naive_forward(model, x), atol=1e-5, rtol=1e-5)
        ref = VisionTransformer(**ARCH)
        ref.load_state_dict(model.state_dict())
        ref.eval()  # mmseg's train()/eval() return None: not chained
        assert not torch.allclose(model(x)[0], ref(x)[0], atol=1e-3)


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
            model(x)[0], naive_forward(model, x), atol=1e-5, rtol=1e-5)


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
