# The elliptical demo trained under Gaussian noise (make certify-noise): its
# dot-product twin's config but the backbone type.
_base_ = ['./segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64_noise.py']
model = dict(backbone=dict(type='EllipticalVisionTransformer'))
