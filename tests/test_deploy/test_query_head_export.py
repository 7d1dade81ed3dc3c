"""The export versions of mmcv's deformable attention and of mmdet's
MaskFormer / Mask2Former parts against the modules they replace (eager).

mmcv's ``MultiScaleDeformableAttention`` takes the level sizes as a tensor,
its export version also as integers; mmdet's pixel decoders and MaskFormer
head build their padding masks per image, the export versions without a loop
over the batch. Each must compute what the original computes, with real
padding where mmdet pads and weights moved from their initialisation.
Exported graphs of whole segmentors are tested in test_export.py.
"""
import copy
import os.path as osp

import pytest
import torch
from builders import ROOT, build_module, seg_samples
from mmcv.cnn.bricks.transformer import MultiScaleDeformableAttention
from mmengine.config import Config
from shipped_configs import tiny_query_head
from torch.utils._pytree import tree_leaves

from mmseg_elliptical.deploy.deform_attn import \
    ExportMultiScaleDeformableAttention
from mmseg_elliptical.deploy.shapes import export_class, export_friendly

pytest.importorskip('mmdet')
pytestmark = pytest.mark.usefixtures('single_thread')

# (h, w) of three levels: none square, one a single row
SHAPES = [(5, 7), (3, 4), (1, 3)]
C, B, QUERIES = 16, 2, 6
IN_CHANNELS = [8, 16, 32, 64]


def moved(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` in eval mode, every weight moved from its initialisation
    (deformable offsets off the grid, attention weights not uniform)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return module.eval()


@pytest.mark.parametrize('batch_first', [True, False])
@pytest.mark.parametrize('points', [2, 4])  # reference points or boxes
def test_export_deformable_attention_computes_as_mmcvs(batch_first, points):
    ref = moved(
        MultiScaleDeformableAttention(
            embed_dims=C,
            num_heads=2,
            num_levels=len(SHAPES),
            num_points=3,
            dropout=0.,
            batch_first=batch_first))
    new = copy.deepcopy(ref)
    new.__class__ = ExportMultiScaleDeformableAttention
    values = sum(h * w for h, w in SHAPES)
    query, pos = torch.randn(B, QUERIES, C), torch.randn(B, QUERIES, C)
    value = torch.randn(B, values, C)
    if not batch_first:
        query, pos, value = (t.transpose(0, 1) for t in (query, pos, value))
    inputs = dict(
        query=query,
        value=value,
        query_pos=pos,
        key_padding_mask=torch.rand(B, values) < 0.3,
        reference_points=torch.rand(B, QUERIES, len(SHAPES), points))
    sizes = torch.tensor(SHAPES)
    with torch.no_grad():
        expected = ref(
            **inputs,
            spatial_shapes=sizes,
            level_start_index=torch.tensor([0, 35, 47]))
        for shapes in (sizes, SHAPES):  # mmdet's tensor, or integers
            got = new(**inputs, spatial_shapes=shapes)
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_export_deformable_attention_names_sizes_that_miss_the_values():
    attn = ExportMultiScaleDeformableAttention(
        embed_dims=C, num_heads=2, num_levels=3, batch_first=True)
    with pytest.raises(
            ValueError,
            match=r'spatial_shapes \[\(5, 7\), \(3, 4\), \(1, 3\)\] cover 50 '
            r'values, got 49'):
        attn(
            torch.randn(1, 4, C),
            value=torch.randn(1, 49, C),
            reference_points=torch.rand(1, 4, 3, 2),
            spatial_shapes=SHAPES)


def head(kind: str, elliptical: bool) -> torch.nn.Module:
    """The shipped Swin-T config's head (mmseg's or the elliptical one) at a
    tiny size, its weights moved."""
    mask = '_elliptical-mask' if elliptical else (
        '_upernet' if kind == 'maskformer' else '')
    path = osp.join(
        ROOT, 'configs', kind,
        f'{kind}_elliptical-swin-t{mask}_8xb2-160k_ade20k-'
        '512x512.py')
    cfg = tiny_query_head(
        Config.fromfile(path).model.decode_head, IN_CHANNELS, QUERIES, 16)
    cfg.num_classes = 5
    return moved(build_module(cfg))


def features(h: int, w: int, batch: int = B) -> list:
    """Random backbone features of an ``h x w`` batch at 1/4 .. 1/32."""
    generator = torch.Generator().manual_seed(h)
    return [
        torch.randn(
            batch,
            c,
            -(-h // 2**(i + 2)),
            -(-w // 2**(i + 2)),
            generator=generator) for i, c in enumerate(IN_CHANNELS)
    ]


def check_export_version(module, version: type, run, export_run=None):
    """``run()`` with ``module``'s classes and ``export_run()`` (default
    ``run``) with their export versions: the same tensors; ``version`` is in
    ``module``'s MRO meanwhile, and its class is restored."""
    cls = type(module)
    with torch.no_grad():
        expected = tree_leaves(run())
        with export_friendly(module):
            assert version in type(module).__mro__
            got = tree_leaves((export_run or run)())
    assert type(module) is cls
    assert len(got) == len(expected) > 0
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_export_msdeformattn_pixel_decoder_computes_as_mmdets():
    from mmseg_elliptical.deploy.query_heads import \
        ExportMSDeformAttnPixelDecoder
    decoder = head('mask2former', False).pixel_decoder
    feats = features(37, 53)  # levels 10x14 .. 2x2
    check_export_version(decoder, ExportMSDeformAttnPixelDecoder,
                         lambda: decoder(feats))


def metas(batch_input_shape, *img_shapes) -> list:
    return [
        dict(batch_input_shape=batch_input_shape, img_shape=s)
        for s in img_shapes
    ]


def test_export_transformer_pixel_decoder_computes_as_mmdets():
    from mmseg_elliptical.deploy.query_heads import \
        ExportTransformerEncoderPixelDecoder
    decoder = moved(
        build_module(
            dict(
                type='mmdet.TransformerEncoderPixelDecoder',
                in_channels=IN_CHANNELS,
                feat_channels=C,
                out_channels=C,
                norm_cfg=dict(type='GN', num_groups=4),
                encoder=dict(
                    num_layers=1,
                    layer_cfg=dict(
                        self_attn_cfg=dict(
                            embed_dims=C,
                            num_heads=2,
                            attn_drop=0.,
                            proj_drop=0.,
                            batch_first=True),
                        ffn_cfg=dict(embed_dims=C,
                                     feedforward_channels=2 * C))),
                positional_encoding=dict(num_feats=C // 2, normalize=True))))
    feats = features(64, 64)  # the last level 2x2
    # the second image padded from row and column 32 on, which the last
    # level's mask samples (nearest from 64 to 2: rows and columns 0, 32)
    padded = metas((64, 64), (64, 64), (32, 32))
    check_export_version(decoder, ExportTransformerEncoderPixelDecoder,
                         lambda: decoder(feats, padded))
    # one meta stands for the whole batch
    same = metas((64, 64), (32, 32))
    check_export_version(decoder, ExportTransformerEncoderPixelDecoder,
                         lambda: decoder(feats, same * B),
                         lambda: decoder(feats, same))


@pytest.mark.parametrize('elliptical', [False, True])
def test_export_maskformer_forward_computes_as_mmdets(elliptical):
    from mmdet.models.dense_heads import MaskFormerHead

    from mmseg_elliptical.deploy.query_heads import ExportMaskFormerForward
    model = head('maskformer', elliptical)
    feats = features(64, 64)
    # the second image padded from row 32 on (row 32 is in the 2x2 mask)
    samples = seg_samples(B, 64, 64, None, heights=[64, 32])
    check_export_version(model, ExportMaskFormerForward,
                         lambda: model(feats, samples))
    check_export_version(model, ExportMaskFormerForward,
                         lambda: model(feats, samples[1:] * B),
                         lambda: model(feats, samples[1:]))
    # just above mmdet's class: what the subclasses add to forward runs
    mro = export_class(type(model)).__mro__
    assert mro.index(ExportMaskFormerForward) + 1 == mro.index(MaskFormerHead)
    assert mro[1] is type(model)
    if elliptical:
        feats[0][0, 0, 0, 0] = float('nan')
        with export_friendly(model), pytest.raises(ValueError, match='NaN'):
            model(feats, samples)


def test_mask2former_heads_keep_their_forward_and_swap_their_parts():
    # mmdet's Mask2FormerHead subclasses MaskFormerHead with a forward of
    # its own, which exports once its pixel decoder does.
    from mmseg_elliptical.deploy.query_heads import \
        ExportMSDeformAttnPixelDecoder
    for elliptical in (False, True):
        model = head('mask2former', elliptical)
        cls = type(model)
        assert export_class(cls) is None
        with export_friendly(model):
            assert type(model) is cls
            assert type(model.pixel_decoder) is ExportMSDeformAttnPixelDecoder
            attentions = [
                type(layer.self_attn)
                for layer in model.pixel_decoder.encoder.layers
            ]
            assert attentions == [ExportMultiScaleDeformableAttention]
        assert type(model.pixel_decoder.encoder.layers[0].self_attn) is \
            MultiScaleDeformableAttention


def test_padding_mask_takes_one_meta_or_one_per_image():
    from mmseg_elliptical.deploy.query_heads import padding_mask
    three = metas((8, 8), (8, 8), (8, 4), (4, 8))
    mask = padding_mask(three, 3, (4, 4), torch.device('cpu'))
    assert mask.shape == (3, 4, 4) and mask.dtype == torch.bool
    assert [int(m.sum()) for m in mask] == [0, 8, 8]
    with pytest.raises(ValueError, match='3 image metas for a batch of 2'):
        padding_mask(three, 2, (4, 4), torch.device('cpu'))
