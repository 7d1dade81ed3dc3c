# The elliptical demo with its evidence (collapse, m, attention) logged live
# to TensorBoard: make demo-tb (pip install -e .[tensorboard]).
_base_ = [
    './segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py'
]
custom_hooks = [
    dict(type='SegSummaryHook', num_scenes=6),
    dict(type='EllipticalEvidenceHook'),
]
visualizer = dict(vis_backends=[
    dict(type='LocalVisBackend'),
    dict(type='TensorboardVisBackend')
])
