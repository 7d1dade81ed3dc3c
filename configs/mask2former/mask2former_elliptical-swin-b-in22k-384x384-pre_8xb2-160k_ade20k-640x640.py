# mmseg's Mask2Former Swin-B (ImageNet-22k, 384x384) at 640x640 on ADE20K with
# elliptical window attention in every Swin block but the first of each stage;
# the decoder is mmseg's. mmseg's pretrained Swin weights load unchanged. Needs
# mmdet: pip install -e '.[mmdet]' (docs/models.md).
_base_ = [
    'mmseg::mask2former/mask2former_swin-b-in22k-384x384-pre_8xb2-160k_'
    'ade20k-640x640.py'
]
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalSwinTransformer'))
