# mmseg's UPerNet with a ViT-B/16 backbone and multi-level neck on ADE20K with
# elliptical attention in layers 1..L-1. mmseg's pretrained weights load
# unchanged.
_base_ = ['mmseg::vit/vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py']
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalVisionTransformer'))
