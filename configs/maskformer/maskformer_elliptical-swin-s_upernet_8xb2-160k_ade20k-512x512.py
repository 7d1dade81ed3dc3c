# mmseg's MaskFormer Swin-S on ADE20K with elliptical window attention in every
# Swin block but the first of each stage; the decoder is mmseg's. mmseg's
# pretrained Swin weights load unchanged. Needs mmdet: pip install -e
# '.[mmdet]' (docs/models.md).
_base_ = [
    'mmseg::maskformer/maskformer_swin-s_upernet_8xb2-160k_'
    'ade20k-512x512.py'
]
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalSwinTransformer'))
