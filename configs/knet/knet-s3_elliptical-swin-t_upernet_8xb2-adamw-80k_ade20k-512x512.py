# mmseg's K-Net (3 kernel-update stages on UPerNet's kernels) Swin-T on ADE20K
# with elliptical window attention in every Swin block but the first of each
# stage; the kernel-update head is mmseg's (docs/models.md says why). mmseg's
# pretrained Swin weights load unchanged. No mmdet needed.
_base_ = [
    'mmseg::knet/knet-s3_swin-t_upernet_8xb2-adamw-80k_'
    'ade20k-512x512.py'
]
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalSwinTransformer'))
