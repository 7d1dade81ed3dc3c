"""Builders of the benchmark's tests: the shrunk ViT-T config and the
benchmark's variants of it or of a tiny family of
:data:`builders.TINY_MODELS`."""
import os.path as osp

from builders import ROOT, TINY_MODELS, tiny_fcn_head

BENCH_VIT_T = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')


BENCH_MMSEG_VIT_T = 'mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_' \
    'ade20k-512x512.py'

# The ViT-T config shrunk for the benchmark tests (as --cfg-options).
BENCH_TINY = {
    'model.backbone.num_layers': 3,
    'model.backbone.embed_dims': 24,
    'model.backbone.img_size': 64,
    'model.decode_head.in_channels': 24,
    'model.decode_head.channels': 24,
    'model.decode_head.embed_dims': 24,
}

BENCH_TINY_ARGS = ['--cfg-options'
                   ] + [f'{k}={v}' for k, v in BENCH_TINY.items()]


def tiny_variants(
        roles=('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref'),
        config=BENCH_VIT_T,
        **kwargs):
    """The benchmark's variants of a shrunk (:data:`BENCH_TINY`) config."""
    from mmseg_elliptical.benchmark.variants import derive_variants
    from mmseg_elliptical.utils.config import load_config
    cfg = load_config(config, BENCH_TINY, no_pretrained=True)
    return derive_variants('vit', config, cfg.model.to_dict(), roles, **kwargs)


def tiny_family_variants(family: str,
                         roles=('elliptical', 'fused-dot', 'mmseg-dot'),
                         whole_model: bool = False,
                         **overrides):
    """The benchmark's variants of a segmentor around the tiny ``family``
    backbone of :data:`TINY_MODELS` (mmseg's ``FCNHead`` on its last feature
    map); ``overrides`` change the backbone's arguments."""
    from mmseg_elliptical.benchmark.variants import derive_variants
    tiny = TINY_MODELS[family]
    model = dict(
        type='EncoderDecoder',
        backbone=dict(tiny.args, type=tiny.cls.__name__, **overrides),
        decode_head=tiny_fcn_head(family))
    return derive_variants(family, f'{family}.py', model, roles, whole_model)
