# mmseg's SegFormer with a MiT-B2 backbone on ADE20K with elliptical attention
# in every block but the first of each stage. mmseg's pretrained weights load
# unchanged.
_base_ = ['mmseg::segformer/segformer_mit-b2_8xb2-160k_ade20k-512x512.py']
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalMixVisionTransformer'))
