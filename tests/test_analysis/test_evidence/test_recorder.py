"""The layer recorder on tiny elliptical and dot-product models."""
import pytest
import torch
import torch.nn as nn
from builders import DEMO_DOT, DEMO_ELLIPTICAL, demo_config
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS
from oracles import naive_relevance

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import LayerRecorder, transformer_layers
from mmseg_elliptical.models import EllipticalAttentionMixin

pytestmark = pytest.mark.usefixtures('single_thread')


def _model(path, demo_root, tmp_path):
    init_default_scope('mmseg')
    cfg = demo_config(path, demo_root, str(tmp_path))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.eval()


def values(layer, tokens):
    """v ``[B, H, N, d]`` of ``layer`` on its input tokens, by hand."""
    mha = layer.attn.attn
    C = tokens.shape[-1]
    v = layer.norm1(tokens) @ mha.in_proj_weight[2 * C:].T \
        + mha.in_proj_bias[2 * C:]
    return v.reshape(*v.shape[:2], mha.num_heads, -1).transpose(1, 2)


@pytest.mark.parametrize('path', [DEMO_ELLIPTICAL, DEMO_DOT])
def test_recorder_captures_and_leaves_no_trace(path, demo_root, tmp_path):
    model = _model(path, demo_root, tmp_path)
    found = transformer_layers(model)
    assert len(found.layers) == 3 and found.layouts[0].prefix == 1
    elliptical = path == DEMO_ELLIPTICAL
    if not elliptical:
        with pytest.raises(TypeError, match='convert=True'):
            LayerRecorder(found, probs=True)
    img = torch.randn(2, 3, 64, 64)
    patch_embed = model.backbone.patch_embed
    with torch.no_grad():
        before = model.backbone(img)[0]
        found = transformer_layers(model, convert=True)
        with LayerRecorder(found, probs=True, relevance=True) as rec:
            assert not any(layer.attn.fused_attn for layer in found.layers)
            during = model.backbone(img)[0]
        after = model.backbone(img)[0]
    torch.testing.assert_close(before, during, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(before, after)
    for layer in found.layers:  # every hook and switch is gone
        assert not layer._forward_hooks and not layer._forward_pre_hooks
        assert layer.attn.fused_attn and layer.attn.attention_record is None
    assert not patch_embed._forward_hooks
    assert [r.grids for r in rec.records] == [[(8, 8)]] * 3
    inputs = [patch_embed(img)[0]]  # tokens entering each layer
    inputs[0] = model.backbone._pos_embeding(
        torch.cat((model.backbone.cls_token.expand(2, -1, -1), inputs[0]), 1),
        (8, 8), model.backbone.pos_embed)
    for i, record in enumerate(rec.records):
        assert record.tokens[0].shape == (2, 65, 48)
        inputs.append(record.tokens[0])
        assert record.probs[0].shape == (2, 3, 65, 65)
        torch.testing.assert_close(record.probs[0].sum(-1),
                                   torch.ones(2, 3, 65))
        if elliptical and i > 0:  # m of the recorded layers' values
            with torch.no_grad():
                m = naive_relevance(
                    values(found.layers[i], inputs[i]),
                    values(found.layers[i - 1], inputs[i - 1]))
            torch.testing.assert_close(record.relevance[0], m)
        else:
            assert record.relevance == []
    rec.clear()
    assert not rec.records[0].tokens and not rec.records[0].grids
    # The recorded output tokens of the last layer are the backbone output
    # before the final norm.
    norm = model.backbone.norm1 if model.backbone.final_norm else nn.Identity()
    out = norm(record.tokens[0])[:, 1:].transpose(1, 2).reshape(2, 48, 8, 8)
    torch.testing.assert_close(out, before)


def test_dot_product_probs_match_torch(demo_root, tmp_path):
    model = _model(DEMO_DOT, demo_root, tmp_path)
    layer = model.backbone.layers[1]
    x = torch.randn(2, 10, 48)
    with torch.no_grad():
        ref = layer.attn.attn(  # mmcv keeps nn.MultiheadAttention seq-first
            x.transpose(0, 1),
            x.transpose(0, 1),
            x.transpose(0, 1),
            need_weights=True,
            average_attn_weights=False)[1]
        found = transformer_layers(model, convert=True)
        assert isinstance(layer.attn, EllipticalAttentionMixin)
        with LayerRecorder(found, tokens=False, probs=[1]) as rec:
            assert [a.fused_attn
                    for a in rec.attentions] == [True, False, True]
            layer.attn(x)
    torch.testing.assert_close(rec.records[1].probs[0], ref)
    assert rec.records[0].probs == rec.records[2].probs == []
