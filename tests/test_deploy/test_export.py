"""ONNX export of every family: onnxruntime against mmseg's ``predict``.

Each family's shipped config, shrunk to a tiny model, is exported once with
dynamic batch, height and width, and onnxruntime's seg logits are compared
with ``segmentor.predict(x)``'s ``seg_logits`` (whole inference; mmseg's
code, not the package's) at the export size and at other heights, widths
and batch sizes, including sizes that need no padding where the trace did
and sizes that do where it did not. BEiT and MAE export at their
``img_size`` (dynamic batch) and refuse another size. MaskFormer and
Mask2Former, each with mmseg's decoder and the elliptical one, export with
dynamic batch, height and width (needs mmdet).
"""
import os.path as osp

import pytest
import torch
from builders import HAS_MMDET, ROOT
from mmengine.config import ConfigDict
from shipped_configs import tiny_query_head

from mmseg_elliptical.deploy import build_segmentor, export_onnx
from mmseg_elliptical.utils import load_config

ort = pytest.importorskip('onnxruntime')

SHAPE = (64, 64)
# Sizes the graphs must follow: the export size, odd sizes, multiples of
# every patch / window / stride (no padding anywhere), non-square.
SIZES = [(1, 64, 64), (2, 48, 112), (3, 37, 53), (1, 96, 80), (2, 56, 56)]
CLASSES = 4


def config(path: str, **overrides) -> ConfigDict:
    """A shipped config with random weights, ``overrides`` merged."""
    overrides = {
        'model.decode_head.num_classes': CLASSES,
        **{
            k.replace('__', '.'): v
            for k, v in overrides.items()
        }
    }
    if not path.startswith('mmseg::'):
        path = osp.join(ROOT, 'configs', path)
    return load_config(path, overrides, True)


def vit(**kw):
    return {
        'model__backbone__img_size': SHAPE,
        'model__backbone__embed_dims': 24,
        'model__backbone__num_heads': 3,
        'model__backbone__num_layers': 2,
        **kw
    }


FAMILIES = {
    'segmenter-vit':
    lambda: config(
        'segmenter/segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-'
        '512x512.py',
        **vit(
            model__decode_head__in_channels=24,
            model__decode_head__channels=24,
            model__decode_head__embed_dims=24,
            model__decode_head__num_layers=1)),
    'segmenter-elliptical-head':
    lambda: config(
        'segmenter/segmenter_elliptical-vit-t_elliptical-mask_8xb1-160k_'
        'ade20k-512x512.py',
        **vit(
            model__decode_head__in_channels=24,
            model__decode_head__channels=24,
            model__decode_head__embed_dims=24)),
    'setr-vit':
    lambda: config(
        'setr/setr_elliptical-vit-l_mla_8xb2-160k_ade20k-512x512.py',
        **vit(
            model__backbone__num_layers=4,
            model__backbone__out_indices=(0, 1, 2, 3),
            model__neck__in_channels=[24] * 4,
            model__neck__out_channels=16,
            model__decode_head__in_channels=(16, ) * 4,
            model__decode_head__channels=32,
            model__decode_head__mla_channels=8,
            model__auxiliary_head=None)),
    'upernet-vit':
    lambda: config(
        'vit/vit_elliptical-deit-s16_mln_upernet_8xb2-160k_ade20k-'
        '512x512.py',
        **vit(
            model__backbone__num_layers=4,
            model__backbone__out_indices=(0, 1, 2, 3),
            model__neck__in_channels=[24] * 4,
            model__neck__out_channels=16,
            model__decode_head__in_channels=[16] * 4,
            model__decode_head__channels=16,
            model__auxiliary_head=None)),
    'dpt-vit':
    lambda: config(
        'dpt/dpt_elliptical-vit-b16_8xb2-160k_ade20k-512x512.py',
        **vit(
            model__backbone__num_layers=4,
            model__backbone__out_indices=(0, 1, 2, 3),
            model__decode_head__in_channels=(24, ) * 4,
            model__decode_head__embed_dims=24,
            model__decode_head__channels=16,
            model__decode_head__post_process_channels=[8, 8, 16, 16])),
    'mit':
    lambda: config(
        'segformer/segformer_elliptical-mit-b0_8xb2-160k_ade20k-512x512.py',
        model__backbone__embed_dims=8,
        model__decode_head__in_channels=[8, 16, 40, 64],
        model__decode_head__channels=16),
    'pcpvt':
    lambda: config(
        'twins/twins_elliptical-pcpvt-s_uperhead_8xb4-160k_ade20k-'
        '512x512.py',
        model__backbone__embed_dims=[8, 16, 40, 64],
        model__backbone__depths=[2, 2, 2, 2],
        model__decode_head__in_channels=[8, 16, 40, 64],
        model__decode_head__channels=16,
        model__auxiliary_head=None),
    'swin':
    lambda: config(
        'swin/elliptical-swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-'
        '160k_ade20k-512x512.py',
        model__backbone__embed_dims=12,
        model__backbone__depths=[2, 2],
        model__backbone__num_heads=[1, 2],
        model__backbone__strides=(4, 2),
        model__backbone__out_indices=(0, 1),
        model__decode_head__in_channels=[12, 24],
        model__decode_head__in_index=[0, 1],
        model__decode_head__channels=16,
        model__auxiliary_head=None),
}


def beit_like(path: str) -> ConfigDict:
    """A 4-layer BEiT / MAE + UPerNet config at the test size."""
    return config(
        path,
        **vit(
            model__backbone__num_layers=4,
            model__backbone__out_indices=(0, 1, 2, 3),
            model__neck__embed_dim=24,
            model__decode_head__in_channels=[24] * 4,
            model__decode_head__channels=16,
            model__auxiliary_head=None))


FIXED_SIZE = {
    'beit':
    lambda: beit_like(
        'beit/elliptical-beit-base_upernet_8xb2-160k_ade20k-640x640.py'),
    'mae':
    lambda: beit_like(
        'mae/elliptical-mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py'),
}

# mmseg's MaskFormer / Mask2Former configs on ResNet: the heads at a tiny size
# (tiny_query_head; one decoder layer, two for the elliptical decoder: the
# second elliptical, chained to the first) on a ResNet-18 of 8 channels,
# which exports in seconds (a 4-stage Swin would add minutes to each export;
# Swin is the swin family's test). The head is most of the export time.
QUERY_HEADS = dict(
    mask2former='mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
    maskformer='maskformer/maskformer_r50-d32_8xb2-160k_ade20k-512x512.py')
HEADS = dict(
    mask2former=('Mask2FormerHead', 'EllipticalMask2FormerHead'),
    maskformer=('MaskFormerHead', 'EllipticalMaskFormerHead'))

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('single_thread')]


def session(path: str):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        path, options, providers=['CPUExecutionProvider'])


def predict(segmentor, x: torch.Tensor) -> torch.Tensor:
    """mmseg's ``predict`` seg logits, whole inference."""
    segmentor.test_cfg = ConfigDict(mode='whole')
    with torch.no_grad():
        return torch.stack([s.seg_logits.data for s in segmentor.predict(x)])


def relative_error(segmentor, sess, b: int, h: int, w: int) -> float:
    x = torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(h))
    ref = predict(segmentor, x)
    out = torch.from_numpy(sess.run(None, {'input': x.numpy()})[0])
    assert out.shape == ref.shape == (b, CLASSES, h, w)
    return float((out - ref).abs().max() / ref.abs().max())


def build(cfg: ConfigDict):
    """The segmentor with seeded weights far from the initialisation, so
    that every path matters."""
    torch.manual_seed(0)
    segmentor = build_segmentor(cfg)
    with torch.no_grad():
        for p in segmentor.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return segmentor


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_dynamic_export_follows_batch_height_and_width(family, tmp_path):
    segmentor = build(FAMILIES[family]())
    path = str(tmp_path / f'{family}.onnx')
    result = export_onnx(segmentor, path, SHAPE, dynamic=True)
    assert result.dynamic_axes == {0: 'batch', 2: 'height', 3: 'width'}
    sess = session(path)
    assert [d for d in sess.get_inputs()[0].shape] == \
        ['batch', 3, 'height', 'width']
    for b, h, w in SIZES:
        assert relative_error(segmentor, sess, b, h, w) < 1e-4, (b, h, w)


@pytest.mark.parametrize('family', sorted(FIXED_SIZE))
def test_beit_and_mae_export_at_img_size_with_dynamic_batch(family, tmp_path):
    segmentor = build(FIXED_SIZE[family]())
    with pytest.raises(
            ValueError,
            match=r'img_size=\(64, 64\).*not 48x112.*--shape 64 64'):
        export_onnx(segmentor, str(tmp_path / 'no.onnx'), (48, 112), True)
    assert not (tmp_path / 'no.onnx').exists()
    path = str(tmp_path / f'{family}.onnx')
    result = export_onnx(segmentor, path, SHAPE, dynamic=True)
    assert result.dynamic_axes == {0: 'batch'}
    assert 'takes 64x64 inputs only' in result.notes[0]
    sess = session(path)
    assert sess.get_inputs()[0].shape == ['batch', 3, 64, 64]
    for b in (1, 3):
        assert relative_error(segmentor, sess, b, *SHAPE) < 1e-4, b


def query_head_config(kind: str, elliptical: bool) -> ConfigDict:
    """mmseg's ResNet config of ``kind`` at a tiny size, with mmseg's decoder
    or the elliptical one."""
    cfg = config(
        'mmseg::' + QUERY_HEADS[kind],
        model__backbone__depth=18,
        model__backbone__stem_channels=8,
        model__backbone__base_channels=8)
    head = tiny_query_head(cfg.model.decode_head, [8, 16, 32, 64], 4, 16)
    head.transformer_decoder.num_layers = 2 if elliptical else 1
    head.type = HEADS[kind][elliptical]
    return cfg


@pytest.mark.skipif(not HAS_MMDET, reason='needs the mmdet extra')
@pytest.mark.parametrize('elliptical', [False, True], ids=['mmseg', 'ell'])
@pytest.mark.parametrize('kind', sorted(QUERY_HEADS))
def test_query_heads_export_with_dynamic_batch_height_and_width(
        kind, elliptical, tmp_path):
    segmentor = build(query_head_config(kind, elliptical))
    decode_head = segmentor.decode_head
    assert type(decode_head).__name__ == HEADS[kind][elliptical]
    expected = (1, ) if elliptical else ()  # layer 1, chained to layer 0
    assert tuple(getattr(decode_head, 'elliptical_layers', ())) == expected
    path = str(tmp_path / f'{kind}.onnx')
    result = export_onnx(segmentor, path, SHAPE, dynamic=True)
    assert result.dynamic_axes == {0: 'batch', 2: 'height', 3: 'width'}
    sess = session(path)
    assert sess.get_inputs()[0].shape == ['batch', 3, 'height', 'width']
    # the export size (batch 1), then another height, width and batch
    for b, h, w in [(1, *SHAPE), (3, 37, 53)]:
        assert relative_error(segmentor, sess, b, h, w) < 1e-4, (b, h, w)
