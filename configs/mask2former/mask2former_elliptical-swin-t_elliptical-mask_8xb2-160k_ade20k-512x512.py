# mmseg's Mask2Former Swin-T on ADE20K with elliptical window attention in
# every Swin block but the first of each stage, and elliptical query self-
# attention in every decoder layer but the first (the masked cross-attention
# stays dot-product). mmseg's checkpoints load unchanged. Needs mmdet: pip
# install -e '.[mmdet]' (docs/models.md).
_base_ = ['./mask2former_elliptical-swin-t_8xb2-160k_ade20k-512x512.py']
model = dict(decode_head=dict(type='EllipticalMask2FormerHead'))
