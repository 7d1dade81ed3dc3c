# Dot-product twin of the demo: mmseg's own ViT + Segmenter mask head, trained
# from scratch on the 64x64 demo shapes in a few minutes on a CPU. "ViT-mini":
# 6 layers, 64 channels, 4 heads of 16, patch 8 (an 8x8 grid of tokens per
# scene). With 2 heads of 32, about 4 runs in 10 ended on the plateau
# (docs/demo.md, "The spread").
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
        embed_dims=64,
        num_layers=6,
        num_heads=4,
        drop_path_rate=0.0),
    decode_head=dict(
        in_channels=64,
        channels=64,
        num_heads=4,
        embed_dims=64,
        drop_path_rate=0.0,
        num_classes=num_classes),
    test_cfg=dict(mode='whole'))

# 200 warm-up iterations to lr 5e-4, then a linear decay to 0.
max_iters = 3000
warmup = 200
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=5e-4, betas=(0.9, 0.999), weight_decay=0.01),
    clip_grad=dict(max_norm=1.0))
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=0.01,
        by_epoch=False,
        begin=0,
        end=warmup),
    dict(
        type='PolyLR',
        power=1.0,
        eta_min=0.0,
        by_epoch=False,
        begin=warmup,
        end=max_iters)
]
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=max_iters, val_interval=250)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    checkpoint=dict(
        type='CheckpointHook', by_epoch=False, interval=500, max_keep_ckpts=2))
# Ends the run with the per-class IoU table and a picture of predictions.
custom_hooks = [dict(type='SegSummaryHook', num_scenes=6)]
# Live evidence (docs/evidence.md): add dict(type='EllipticalEvidenceHook')
# to custom_hooks; and for TensorBoard (pip install -e .[tensorboard]):
# visualizer = dict(vis_backends=[dict(type='LocalVisBackend'), dict(type='TensorboardVisBackend')])  # noqa: E501
randomness = dict(seed=0)
