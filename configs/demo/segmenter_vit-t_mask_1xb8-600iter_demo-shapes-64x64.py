# Dot-product twin of the demo: mmseg's own ViT-T + Segmenter mask head, a
# patch size of 8 on the 64x64 demo scenes, trained from scratch on the CPU.
_base_ = [
    'mmseg::_base_/models/segmenter_vit-b16_mask.py',
    '../_base_/datasets/demo_shapes.py',
    'mmseg::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)

crop_size = (64, 64)
num_classes = 5
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(
        img_size=crop_size,
        patch_size=8,
        embed_dims=192,
        num_heads=3,
        drop_path_rate=0.0),
    decode_head=dict(
        in_channels=192,
        channels=192,
        num_heads=3,
        embed_dims=192,
        drop_path_rate=0.0,
        num_classes=num_classes),
    test_cfg=dict(mode='whole'))

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=0.01),
    clip_grad=dict(max_norm=1.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='PolyLR', power=0.9, eta_min=1e-6, by_epoch=False, begin=50,
         end=600)
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=600, val_interval=200)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=200,
                    max_keep_ckpts=2))
randomness = dict(seed=0)
