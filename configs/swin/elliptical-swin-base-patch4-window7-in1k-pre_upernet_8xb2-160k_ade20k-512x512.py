# mmseg's UPerNet Swin-B (ImageNet-1k pretrained) on ADE20K with elliptical
# window attention in every Swin block but the first of each stage.
# mmseg's pretrained Swin weights load unchanged.
_base_ = [
    'mmseg::swin/swin-base-patch4-window7-in1k-pre_upernet_8xb2-160k_'
    'ade20k-512x512.py'
]
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalSwinTransformer'))
