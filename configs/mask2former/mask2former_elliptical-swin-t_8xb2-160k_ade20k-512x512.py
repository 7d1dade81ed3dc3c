# mmseg's Mask2Former Swin-T on ADE20K with elliptical window attention in
# every Swin block but the first of each stage; the decoder is mmseg's. mmseg's
# pretrained Swin weights load unchanged. Needs mmdet: pip install -e
# '.[mmdet]' (docs/models.md).
_base_ = [
    'mmseg::mask2former/mask2former_swin-t_8xb2-160k_'
    'ade20k-512x512.py'
]
# custom_imports replaces mmseg's import of mmdet.models: mmseg's Mask2Former
# head imports mmdet itself, and without mmdet the plugin names the extra.
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalSwinTransformer'))
