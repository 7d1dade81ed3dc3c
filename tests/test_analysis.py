"""Analysis hooks and statistics on tiny elliptical and dot-product models."""
import pytest
import torch
import torch.nn as nn
from helpers import DEMO_DOT, DEMO_ELLIPTICAL, tiny_config
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS
from oracles import naive_relevance

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import (LayerRecorder, mean_pairwise_cosine,
                                       relevance_spread, transformer_layers)
from mmseg_elliptical.models import EllipticalAttentionMixin

pytestmark = pytest.mark.usefixtures('single_thread')


def test_mean_pairwise_cosine_extremes_and_brute_force():
    same = torch.randn(1, 1, 8).expand(2, 5, 8)
    torch.testing.assert_close(
        mean_pairwise_cosine(same), torch.ones(2, dtype=torch.float64))
    ortho = torch.eye(6).unsqueeze(0)
    torch.testing.assert_close(
        mean_pairwise_cosine(ortho), torch.zeros(1, dtype=torch.float64))
    opposite = torch.tensor([[[1., 0.], [-1., 0.]]])
    assert mean_pairwise_cosine(opposite).item() == pytest.approx(-1)
    x = torch.randn(3, 7, 4)
    u = nn.functional.normalize(x, dim=-1)
    sim = u @ u.transpose(1, 2)
    i, j = torch.triu_indices(7, 7, offset=1)
    torch.testing.assert_close(
        mean_pairwise_cosine(x).float(), sim[:, i, j].mean(-1))
    with pytest.raises(ValueError, match='N >= 2'):
        mean_pairwise_cosine(torch.randn(2, 1, 4))


def test_relevance_spread():
    assert relevance_spread(torch.ones(2, 3, 1, 4)).tolist() == [0, 0]
    m = torch.tensor([0., 1.]).expand(1, 2, 1, 2)
    assert relevance_spread(m).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r'\[B, H, 1, d\]'):
        relevance_spread(torch.ones(2, 4))


def _model(path, demo_root, tmp_path):
    init_default_scope('mmseg')
    cfg = tiny_config(path, demo_root, str(tmp_path))
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
    assert len(found.layers) == 3 and found.patch_slice == slice(1, None)
    elliptical = path == DEMO_ELLIPTICAL
    if not elliptical:
        with pytest.raises(TypeError, match='convert=True'):
            LayerRecorder(found.layers, probs=True)
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        before = model.backbone(img)[0]
        found = transformer_layers(model, convert=True)
        with LayerRecorder(
                found.layers,
                probs=True,
                relevance=True,
                patch_embed=found.patch_embed) as rec:
            assert not any(layer.attn.fused_attn for layer in found.layers)
            during = model.backbone(img)[0]
        after = model.backbone(img)[0]
    torch.testing.assert_close(before, during, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(before, after)
    for layer in found.layers:  # every hook and switch is gone
        assert not layer.ffn._forward_hooks
        assert layer.attn.fused_attn and layer.attn.attention_record is None
    assert rec.hw_shapes == [(8, 8)]
    inputs = [found.patch_embed(img)[0]]  # tokens entering each layer
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
    assert not rec.records[0].tokens and not rec.hw_shapes
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
        transformer_layers(model, convert=True)
        assert isinstance(layer.attn, EllipticalAttentionMixin)
        with LayerRecorder([layer], tokens=False, probs=True) as rec:
            layer.attn(x)
    torch.testing.assert_close(rec.records[0].probs[0], ref)


def test_decode_head_layers_and_bad_part(demo_root, tmp_path):
    model = _model(DEMO_ELLIPTICAL, demo_root, tmp_path)
    found = transformer_layers(model, 'decode_head')
    assert found.patch_slice == slice(None, -5)
    with pytest.raises(ValueError, match='"backbone" or "decode_head"'):
        transformer_layers(model, 'neck')
    model.decode_head = nn.Conv2d(1, 1, 1)
    with pytest.raises(ValueError, match='no transformer layers'):
        transformer_layers(model, 'decode_head')


def test_query_patch_known_points():
    from mmseg_elliptical.analysis import query_patch

    # 100 x 80 image resized to 64 x 51, 8 x 8 patches, 8 x 7 grid.
    args = dict(
        ori_shape=(100, 80), img_shape=(64, 51), stride=(8, 8), grid=(8, 7))
    # y=30 -> 19.2 input rows -> patch row 2; x=40 -> 25.5 -> column 3.
    assert query_patch((40, 30), **args) == (2, 3)
    assert query_patch((0, 0), **args) == (0, 0)
    assert query_patch((79, 99), **args) == (7, 6)  # the last pixel
    # Non-square stride: rows of 4 pixels, columns of 16.
    assert query_patch((40, 30), (100, 80), (64, 51), (4, 16),
                       (16, 4)) == (4, 1)
    with pytest.raises(ValueError, match=r'\(80, 10\) lies outside the 80 x'):
        query_patch((80, 10), **args)
