# The elliptical demo with its evidence (collapse, m, attention) logged live
# to TensorBoard: make demo-tb (pip install -e .[tensorboard]). The only
# change from its dot-product twin is the backbone type.
_base_ = [
    './segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64_tensorboard.py'
]
model = dict(backbone=dict(type='EllipticalVisionTransformer'))
