# mmseg's Segmenter ViT-B (mask head) on ADE20K with elliptical attention in
# backbone layers 1..11. mmseg's pretrained ViT weights load unchanged.
_base_ = ['mmseg::segmenter/segmenter_vit-b_mask_8xb1-160k_ade20k-512x512.py']
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalVisionTransformer'))
