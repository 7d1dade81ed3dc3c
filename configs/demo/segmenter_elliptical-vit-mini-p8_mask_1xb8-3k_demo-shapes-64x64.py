# The demo with elliptical attention in the backbone (layers 1..5): the only
# change from its dot-product twin is the backbone type.
_base_ = ['./segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py']
model = dict(backbone=dict(type='EllipticalVisionTransformer'))
# Live evidence in TensorBoard: see the twin's commented visualizer line,
# or the *_tensorboard.py configs (make demo-tb).
