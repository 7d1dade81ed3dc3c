"""The layers and token layouts the analysis finds, per family."""
import pytest
import torch
import torch.nn as nn
from builders import BACKBONES, TINY_MODELS
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS
from saved_models import QueryDecoder, family_config

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import (CollapseMeter, LayerRecorder,
                                       transformer_layers)
from mmseg_elliptical.models import EllipticalAttentionMixin
from mmseg_elliptical.models.attention import EllipticalAttention
from mmseg_elliptical.models.backbones.vit import EllipticalViTLayer
from mmseg_elliptical.models.transformer import (EllipticalTransformerMixin,
                                                 TokenLayout)

pytestmark = pytest.mark.usefixtures('single_thread')


def build(family, demo_root, tmp_path, elliptical=True):
    init_default_scope('mmseg')
    cfg = family_config(family, demo_root, str(tmp_path), elliptical)
    torch.manual_seed(0)
    return MODELS.build(cfg.model).eval()


@pytest.mark.parametrize('family', sorted(BACKBONES))
def test_layers_stages_and_layouts(family, demo_root, tmp_path):
    spec = TINY_MODELS[family]
    found = transformer_layers(build(family, demo_root, tmp_path))
    assert found.stages == spec.stages
    assert len(found.layers) == len(spec.stages)
    assert [tuple(lay.stride) for lay in found.layouts] == spec.strides
    prefix = 1 if family in ('vit', 'beit', 'mae') else 0
    assert all(lay.prefix == prefix and lay.suffix == 0
               for lay in found.layouts)
    keys = dict(mit='reduced', pcpvt='reduced', swin='windows')
    assert {lay.keys for lay in found.layouts} == {keys.get(family, 'tokens')}
    if family == 'mit':
        assert [lay.reduction for lay in found.layouts] == [3, 1]
    # The grids recorded in one forward, by hand: square 64 x 64 inputs
    # (BEiT, MAE: their 32 x 24 crops), and 64 x 96 where the size is free.
    model = build(family, demo_root, tmp_path)
    h, w = spec.crop or (64, 64)
    with LayerRecorder(transformer_layers(model), tokens=False) as rec:
        with torch.no_grad():
            model.backbone(torch.randn(1, 3, h, w))
            if spec.crop is None:
                model.backbone(torch.randn(1, 3, 64, 96))
    wide = [(64 // sh, 96 // sw) for sh, sw in spec.strides]
    assert [r.grids for r in rec.records
            ] == [[spec.grids[s]] + ([wide[s]] if spec.crop is None else [])
                  for s in spec.stages]


@pytest.mark.parametrize('family', ['vit', 'swin'])
def test_mmseg_class_is_read_and_converted(family, demo_root, tmp_path):
    """mmseg's own class: layers found through its elliptical version;
    converted (dot-product mode) only when asked."""
    cfg = family_config(family, demo_root, str(tmp_path))
    cfg.model.backbone.type = cfg.model.backbone.type.replace('Elliptical', '')
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    found = transformer_layers(model)
    assert len(found.layers) == len(TINY_MODELS[family].stages)
    assert not isinstance(found.attention(1), EllipticalAttentionMixin)
    found = transformer_layers(model, convert=True)
    assert isinstance(model.backbone, EllipticalTransformerMixin)
    assert model.backbone.elliptical_layers == ()
    assert isinstance(found.attention(1), EllipticalAttentionMixin)


def test_decode_head_and_errors(demo_root, tmp_path):
    from builders import DEMO_ELLIPTICAL, demo_config
    init_default_scope('mmseg')
    model = MODELS.build(
        demo_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path)).model)
    found = transformer_layers(model, 'decode_head')
    assert len(found.layers) == 2
    layout = found.layouts[0]
    assert (layout.grid, layout.prefix, layout.suffix) == ('backbone', 0, 5)
    tokens = torch.randn(1, 64 + 5, 48)
    torch.testing.assert_close(found.counted_tokens(0, tokens), tokens[:, :64])
    with pytest.raises(ValueError, match='"backbone" or "decode_head"'):
        transformer_layers(model, 'neck')
    model.decode_head = nn.Conv2d(1, 1, 1)
    with pytest.raises(
            ValueError, match='Conv2d.*no elliptical version.*'
            'SwinTransformer'):
        transformer_layers(model, 'decode_head')
    with pytest.raises(ValueError, match='keys=.*must be one of'):
        TokenLayout(keys='local')
    with pytest.raises(ValueError, match='grid=.*must be'):
        TokenLayout(grid='input')


def test_default_layout_is_tokens_without_grid():
    holder = QueryDecoder.holding()
    part = holder.backbone
    found = transformer_layers(holder)
    assert found.stages == [0, 0, 1, 1]
    assert found.layouts == [TokenLayout(), TokenLayout()]
    assert type(found.layers[0]) is EllipticalViTLayer
    assert isinstance(found.attention(1), EllipticalAttention)
    queries = torch.randn(2, 5, 8)
    torch.testing.assert_close(found.counted_tokens(0, queries), queries)
    with CollapseMeter(found) as meter, torch.no_grad():
        part(torch.randn(2, 3, 16, 16))
        meter.collect()
    result = meter.result()
    # 16 patch tokens and the cls token: all counted, none is a grid cell.
    assert result['tokens'] == [17] * 4
    assert [s is None for s in result['relevance_spread']] == \
        [True, False, True, False]
