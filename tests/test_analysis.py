"""Analysis hooks and statistics on tiny elliptical and dot-product models."""
import pytest
import torch
import torch.nn as nn
from mmengine.registry import init_default_scope

from mmseg.registry import MODELS

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import (LayerRecorder, attention_probs,
                                       mean_pairwise_cosine, relevance_spread,
                                       transformer_layers)
from mmseg_elliptical.models import EllipticalAttention
from conftest import DEMO_DOT, DEMO_ELLIPTICAL, tiny_config

pytestmark = pytest.mark.usefixtures('single_thread')


def test_mean_pairwise_cosine_extremes_and_brute_force():
    same = torch.randn(1, 1, 8).expand(2, 5, 8)
    torch.testing.assert_close(mean_pairwise_cosine(same),
                               torch.ones(2, dtype=torch.float64))
    ortho = torch.eye(6).unsqueeze(0)
    torch.testing.assert_close(mean_pairwise_cosine(ortho),
                               torch.zeros(1, dtype=torch.float64))
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


@pytest.mark.parametrize('path', [DEMO_ELLIPTICAL, DEMO_DOT])
def test_recorder_captures_and_leaves_no_trace(path, demo_root, tmp_path):
    model = _model(path, demo_root, tmp_path)
    found = transformer_layers(model)
    assert len(found.layers) == 3 and found.patch_slice == slice(1, None)
    elliptical = path == DEMO_ELLIPTICAL
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        before = model.backbone(img)[0]
        with LayerRecorder(found.layers, attn_inputs=True, relevance=True,
                           patch_embed=found.patch_embed) as rec:
            during = model.backbone(img)[0]
        after = model.backbone(img)[0]
    torch.testing.assert_close(before, during)
    torch.testing.assert_close(before, after)
    for layer in found.layers:  # every hook is gone
        assert not layer.ffn._forward_hooks
        assert not layer.attn._forward_hooks
        assert not layer.attn._forward_hooks_with_kwargs
    assert rec.hw_shapes == [(8, 8)]
    for i, record in enumerate(rec.records):
        assert record.tokens[0].shape == (2, 65, 48)
        assert record.attn_inputs[0].shape == (2, 65, 48)
        m = record.relevance[0]
        if elliptical and i > 0:
            assert m.shape == (2, 3, 1, 16)
            assert record.v_prev[0].shape == (2, 3, 65, 16)
        else:
            assert m is None
        probs = attention_probs(found.layers[i].attn, record.attn_inputs[0],
                                record.v_prev[0])
        assert probs.shape == (2, 3, 65, 65)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 65))
    rec.clear()
    assert not rec.records[0].tokens and not rec.hw_shapes
    # The recorded output tokens of the last layer are the backbone output
    # before the final norm.
    norm = model.backbone.norm1 if model.backbone.final_norm else nn.Identity()
    out = norm(record.tokens[0])[:, 1:].transpose(1, 2).reshape(2, 48, 8, 8)
    torch.testing.assert_close(out, before)


def test_dot_product_probs_match_torch(demo_root, tmp_path):
    model = _model(DEMO_DOT, demo_root, tmp_path)
    attn = model.backbone.layers[1].attn
    assert not isinstance(attn, EllipticalAttention)
    x = torch.randn(2, 10, 48)
    with torch.no_grad():
        ref = attn.attn(  # mmcv keeps nn.MultiheadAttention sequence-first
            x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1),
            need_weights=True, average_attn_weights=False)[1]
        torch.testing.assert_close(attention_probs(attn, x), ref)


def test_elliptical_probs_use_relevance(demo_root, tmp_path):
    model = _model(DEMO_ELLIPTICAL, demo_root, tmp_path)
    attn = model.backbone.layers[1].attn
    x = torch.randn(1, 10, 48)
    v_prev = torch.randn(1, 3, 10, 16)
    with torch.no_grad():
        dot = attention_probs(attn, x)
        ell = attention_probs(attn, x, v_prev)
    assert not torch.allclose(dot, ell)
    torch.testing.assert_close(ell.sum(-1), torch.ones(1, 3, 10))


def test_decode_head_layers_and_bad_part(demo_root, tmp_path):
    model = _model(DEMO_ELLIPTICAL, demo_root, tmp_path)
    found = transformer_layers(model, 'decode_head')
    assert found.patch_slice == slice(None, -5)
    with pytest.raises(ValueError, match='"backbone" or "decode_head"'):
        transformer_layers(model, 'neck')
    model.decode_head = nn.Conv2d(1, 1, 1)
    with pytest.raises(ValueError, match='no transformer layers'):
        transformer_layers(model, 'decode_head')
    with pytest.raises(TypeError, match='attention_probs supports'):
        attention_probs(nn.Linear(2, 2), torch.randn(1, 2, 2))
