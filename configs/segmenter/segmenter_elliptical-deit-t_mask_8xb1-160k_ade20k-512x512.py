# The authors' recipe (Nielsen et al., 2024): Segmenter with a DeiT-Tiny
# backbone, elliptical attention in layers 1..11, dot-product mask head.
# SGD lr 1e-3, momentum 0.9, no weight decay, poly decay (power 0.9) to 1e-5,
# 8 images per iteration (8 GPUs x 1 image, or 1 GPU with
# train_dataloader.batch_size=8), 512x512 crops, sliding-window test, stride
# 512.
#
# DeiT-Tiny weights: download deit_tiny_patch16_224-a1311bcf.pth from the DeiT
# release and convert them to mmseg's layout:
#   python tools/model_converters/deit2mmseg.py \
#       deit_tiny_patch16_224-a1311bcf.pth \
#       pretrain/deit_tiny_patch16_224-mmseg.pth
_base_ = ['./segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py']

# DeiT was trained with ImageNet normalisation, not ViT's 127.5/127.5.
data_preprocessor = dict(
    mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained='pretrain/deit_tiny_patch16_224-mmseg.pth',
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(512, 512)))

optimizer = dict(type='SGD', lr=1e-3, momentum=0.9, weight_decay=0.0)
optim_wrapper = dict(type='OptimWrapper', optimizer=optimizer, clip_grad=None)
param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=1e-5,
        power=0.9,
        begin=0,
        end=160000,
        by_epoch=False)
]
train_dataloader = dict(batch_size=1)  # x 8 GPUs = 8 images per iteration
