"""``decode_heads/segmenter_mask_head.py``: EllipticalMaskTransformerHead
against mmseg's head, its layers threaded by hand, and its input checks."""
import pytest
import torch
from mmseg.models.decode_heads import SegmenterMaskTransformerHead

from mmseg_elliptical.models import EllipticalMaskTransformerHead

HEAD = dict(
    in_channels=24,
    channels=24,
    num_classes=5,
    num_layers=3,
    num_heads=3,
    embed_dims=24,
    dropout_ratio=0.0,
    drop_path_rate=0.0)


def build(cls, **kwargs):
    torch.manual_seed(0)
    head = cls(**HEAD, **kwargs)
    head.init_weights()
    return head.eval()


def test_dot_product_mode_equals_mmseg():
    ref = build(SegmenterMaskTransformerHead)
    ours = build(EllipticalMaskTransformerHead, elliptical_layers=[])
    for (k1, p1), (k2, p2) in zip(ref.state_dict().items(),
                                  ours.state_dict().items()):
        assert k1 == k2 and torch.equal(p1, p2)
    x = [torch.randn(2, 24, 5, 6)]
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def test_elliptical_head_defaults_and_differs():
    head = build(EllipticalMaskTransformerHead)
    assert head.elliptical_layers == (1, 2)
    assert [layer.attn.elliptical
            for layer in head.layers] == [False, True, True]
    ref = build(SegmenterMaskTransformerHead)
    ref.load_state_dict(head.state_dict(), strict=True)
    head.load_state_dict(ref.state_dict(), strict=True)
    x = [torch.randn(2, 24, 5, 6)]
    out = head(x)
    assert out.shape == (2, 5, 5, 6) and torch.isfinite(out).all()
    assert not torch.allclose(out, ref(x), atol=1e-4)


def test_only_layer_two_elliptical_matches_manual_threading():
    """Layer 2 scores with the values of layer 1; layers 0-1 dot-product."""
    head = build(EllipticalMaskTransformerHead, elliptical_layers=[2])
    feats = torch.randn(2, 24, 5, 6)
    seen = []
    head.decoder_norm.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    head([feats])

    x = head.dec_proj(feats.flatten(2).transpose(1, 2))
    x = torch.cat((x, head.cls_emb.expand(2, -1, -1)), 1)
    v_prev = None
    for i, layer in enumerate(head.layers):
        attn = layer.attn
        with attn.chained(v_prev if i == 2 else None, keep=True) as call:
            y = attn(layer.norm1(x), identity=x)
        x = layer.ffn(layer.norm2(y), identity=y)
        v_prev = call.values
    torch.testing.assert_close(seen[0], x, atol=1e-5, rtol=1e-5)
    assert head.layers[2].attn.elliptical
    assert not head.layers[1].attn.elliptical


def test_training_loss_and_gradients():
    head = build(EllipticalMaskTransformerHead).train()
    x = [torch.randn(2, 24, 5, 6, requires_grad=True)]
    head(x).logsumexp(1).mean().backward()
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in head.parameters() if p.requires_grad)


def test_head_rejects_wrong_channels() -> None:
    head = build(EllipticalMaskTransformerHead)
    with pytest.raises(
            ValueError,
            match=r'in_channels=24 but the input '
            r'feature map has shape \(1, 16, 4, 4\)'):
        head([torch.randn(1, 16, 4, 4)])
    assert head([torch.randn(1, 24, 4, 4)]).shape == (1, 5, 4, 4)


@pytest.mark.parametrize('mode', ['cpu', 'always', True])
def test_head_rejects_non_finite_features(mode) -> None:
    head = build(EllipticalMaskTransformerHead, check_finite=mode)
    feats = torch.randn(1, 24, 4, 4)
    feats[0, 0, 0, 0] = float('nan')
    with pytest.raises(
            ValueError,
            match='features contain NaN or infinite '
            'values.*decode_head.check_finite=.never.'):
        head([feats])
    for off in ('never', False):
        out = build(EllipticalMaskTransformerHead, check_finite=off)([feats])
        assert out.isnan().any()
