"""Attention maps per family: the query's token, its row over the image,
against torch's attention weights where torch computes them."""
import os.path as osp

import numpy as np
import pytest
import torch
from builders import TINY_MODELS
from evidence_oracles import window_slot
from processes import load_tool, refused
from saved_models import (QueryDecoder, family_config, first_images,
                          load_model, save_model)

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import (image_maps, model_attention,
                                       transformer_layers)
from mmseg_elliptical.analysis.evidence.attention_maps import check_map_layers
from mmseg_elliptical.utils import model_specs

pytestmark = pytest.mark.usefixtures('single_thread')

#: Per family, by hand: the layer shown, the query pixel (x, y) of a 64 x
#: 64 scene, the crop holding it and the query token.
QUERIES = dict(
    vit=(1, (30, 20), (0, 64, 0, 64), (2, 3)),
    # BEiT, MAE: the first of mmseg's 32 x 24 crops (x at 0, 24, 40; y at 0,
    # 32) that holds the point.
    beit=(1, (40, 20), (0, 32, 24, 48), (2, 2)),  # crop x 24..48
    mae=(2, (10, 50), (32, 64, 0, 24), (2, 1)),  # crop y 32..64
    mit=(0, (30, 20), (0, 64, 0, 64), (5, 7)),
    pcpvt=(2, (30, 20), (0, 64, 0, 64), (2, 3)),
    swin=(1, (30, 20), (0, 64, 0, 64), (5, 7)),
)


def scene(demo_root):
    return osp.join(demo_root, 'images', 'validation', 'demo_00001.jpg')


@pytest.mark.parametrize('family', sorted(QUERIES))
def test_maps_per_family(family, family_models, demo_root):
    layer, point, box, query = QUERIES[family]
    spec, = model_specs(family_models[family])
    res = model_attention(spec, scene(demo_root), point, [layer])
    stage = TINY_MODELS[family].stages[layer]
    entry = res['layers'][layer]
    assert entry['grid'] == TINY_MODELS[family].grids[stage]
    assert entry['stride'] == TINY_MODELS[family].strides[stage]
    assert (res['box'], entry['query'], entry['stage']) == (box, query, stage)
    maps, off = entry['maps'], entry['off_grid']
    assert maps.shape[1:] == entry['grid']
    if family == 'mit':  # 16 x 16 tokens under 5 x 5 keys of 3 x 3
        np.testing.assert_allclose(maps.sum((1, 2)) / 9, 1, atol=1e-5)
        assert (maps[:, 15] == 0).all() and (off == 0).all()
    else:
        np.testing.assert_allclose(maps.sum((1, 2)) + off, 1, atol=1e-5)
    if family == 'swin':  # shifted block: only the query's window
        window, _ = window_slot(*query, 18, 3, 1)
        rows, cols = np.nonzero(maps.sum(0))
        assert {window_slot(r, c, 18, 3, 1)[0]
                for r, c in zip(rows, cols)} == {window}
        assert 0 < len(rows) <= 9
    full = image_maps(res, layer)
    assert full.shape == (len(maps), 64, 64)
    y1, y2, x1, x2 = box
    assert full[:, :y1].sum() == full[:, y2:].sum() == 0
    assert full[:, :, :x1].sum() == full[:, :, x2:].sum() == 0
    # m of every elliptical layer: all but the first of each stage.
    stages = TINY_MODELS[family].stages
    assert sorted(res['relevance']) == [
        i for i in range(len(stages)) if i and stages[i] == stages[i - 1]
    ]


@torch.no_grad()
def torch_weights(model, attention, layer_input):
    """nn.MultiheadAttention's own per-head weights on a layer's input."""
    seen = []
    hook = attention.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append((args, kwargs)), with_kwargs=True)
    layer_input(model)
    hook.remove()
    args, kwargs = seen[0]
    x_q = args[0] if args else kwargs['x']
    x_kv = x_q
    if hasattr(attention, 'sr'):  # MiT: keys from the reduced tokens
        h, w = args[1]
        image = x_q.transpose(1, 2).reshape(x_q.shape[0], -1, h, w)
        x_kv = attention.norm(attention.sr(image).flatten(2).transpose(1, 2))
    q, kv = x_q.transpose(0, 1), x_kv.transpose(0, 1)  # sequence first
    return attention.attn(
        q, kv, kv, need_weights=True, average_attn_weights=False)[1]


@pytest.mark.parametrize('family, layer', [('vit', 1), ('mit', 0)])
def test_maps_are_torch_weights(family, layer, demo_root, tmp_path):
    """In dot-product mode (``elliptical_layers=[]``) the recorded row is
    torch's own attention weights, placed by hand."""
    cfg = family_config(family, demo_root, str(tmp_path), elliptical=False)
    paths = save_model(cfg, str(tmp_path / 'dot.py'))
    spec, = model_specs(paths)
    _, point, _, (row, col) = QUERIES[family]
    res = model_attention(spec, scene(demo_root), point, [layer])
    model = load_model(paths)
    found = transformer_layers(model)
    second = list(first_images(paths[0], 2))[1]  # demo_00001
    assert second['data_samples'][0].img_path == scene(demo_root)
    weights = torch_weights(model, found.attention(layer),
                            lambda m: m.test_step(second))
    h, w = TINY_MODELS[family].grids[TINY_MODELS[family].stages[layer]]
    if family == 'vit':  # after the cls token
        expected = weights[0, :, 1 + row * w + col, 1:].reshape(-1, h, w)
    else:  # 5 x 5 keys of 3 x 3 tokens, the last row and column uncovered
        keys = weights[0, :, row * w + col].reshape(-1, 5, 5)
        expected = torch.zeros(len(keys), h, w)
        expected[:, :15, :15] = keys.repeat_interleave(3, 1).repeat_interleave(
            3, 2)
    np.testing.assert_allclose(
        res['layers'][layer]['maps'], expected.numpy(), atol=1e-6)


def test_no_maps_for_tokens_without_grid():
    found = transformer_layers(QueryDecoder.holding())
    with pytest.raises(ValueError, match=r'layers \[1\] .*no image grid'):
        check_map_layers(found, [1], 'queries')
    with pytest.raises(ValueError, match=r'layers \[4\] out of range'):
        check_map_layers(found, [4], 'queries')


@torch.no_grad()
def mha_row(paths, image, part, layer, query, prefix):
    """torch's weights of one query of a demo model's layer."""
    from mmseg.apis import inference_model
    model = load_model(paths)
    attention = getattr(model, part).layers[layer].attn
    seen = []
    hook = attention.register_forward_pre_hook(
        lambda m, args: seen.append(args[0]))
    inference_model(model, image)
    hook.remove()
    x = seen[0].transpose(0, 1)  # nn.MultiheadAttention is sequence-first
    weights = attention.attn(
        x, x, x, need_weights=True, average_attn_weights=False)[1]
    return weights[0, :, prefix + query, prefix:prefix + 64].reshape(-1, 8, 8)


def test_attention_maps_tool(demo_models, demo_root, tmp_path, capsys):
    tool = load_tool('analysis_tools/attention_maps.py')
    out = str(tmp_path / 'attention.png')
    argv = [scene(demo_root)] + demo_models + ['--point', '30', '20']
    results = tool.main(argv + ['--out', out, '--mean-heads'])
    # Point (30, 20) on 8 x 8 patches: token 2 * 8 + 3, after the cls token.
    expected = mha_row(demo_models[2:], scene(demo_root), 'backbone', 1, 19, 1)
    np.testing.assert_allclose(
        results['dot']['layers'][1]['maps'], expected.numpy(), atol=1e-6)
    for res in results.values():
        assert sorted(res['layers']) == [1, 2]
    assert sorted(results['ell']['relevance']) == [1, 2]
    assert results['dot']['relevance'] == {}
    assert osp.getsize(out) > 0
    assert osp.getsize(tmp_path / 'attention_relevance.png') > 0
    # The decode head: patch tokens first, the 5 class embeddings after.
    head = tool.main(
        argv + ['--part', 'decode_head', '--layers', '0', '1', '--out', out])
    expected = mha_row(demo_models[2:], scene(demo_root), 'decode_head', 1, 19,
                       0)
    entry = head['dot']['layers'][1]
    np.testing.assert_allclose(entry['maps'], expected.numpy(), atol=1e-6)
    assert entry['stride'] == (8, 8) and entry['grid'] == (8, 8)
    assert (entry['off_grid'] > 0).all()  # on the class embeddings
    assert 'argument --point: (64, 0) lies outside the 64 x 64 image' in \
        refused(capsys, tool.main, [scene(demo_root)] + demo_models +
                ['--point', '64', '0', '--out', out])
    assert 'ell: layers [3] out of range' in refused(
        capsys, tool.main, argv + ['--layers', '3', '--out', out])
    assert 'heads [7] out of range' in refused(
        capsys, tool.main, argv + ['--heads', '7', '--out', out])
